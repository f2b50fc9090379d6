"""How a number's source looks on a figure: title, colour family and fill (measured solid, simulated
hatched, interpreted dotted).
"""

from __future__ import annotations

from labkit.device import SOURCES

#: legend order: measured first
SOURCE_ORDER: tuple[str, ...] = SOURCES
SOURCE_TITLES = {
    "measured-gpu": "measured on a GPU",
    "measured-cpu": "measured on a CPU",
    "simulated": "simulated (a model, not hardware)",
    "interpreted": "interpreted (correctness only, never timed)",
}
#: source -> (colour family, bar pattern shape; "" = solid)
SOURCE_STYLE: dict[str, tuple[tuple[str, ...], str]] = {
    "measured-gpu": (("#1f5fa8", "#2b9e3f", "#0f8f9e", "#5b3fa8", "#7a9e1f"), ""),
    "measured-cpu": (("#d9730d", "#b8322a", "#8c564b", "#c9a10a"), ""),
    "simulated": (("#8e6bbf", "#7f7f7f", "#b07aa1"), "/"),
    "interpreted": (("#a0a018", "#6b6b6b"), "."),
}
_UNKNOWN = (("#444444",), "x")


def source_rank(source: str) -> int:
    """Position of ``source`` in ``SOURCE_ORDER`` (unknown sources last)."""
    return SOURCE_ORDER.index(source) if source in SOURCE_ORDER else len(SOURCE_ORDER)


def source_title(source: str) -> str:
    """Legend-group title for ``source``."""
    return SOURCE_TITLES.get(source, source)


def source_style(source: str, index: int = 0) -> tuple[str, str]:
    """``(colour, pattern shape)`` for the ``index``-th machine with numbers from ``source``."""
    colours, pattern = SOURCE_STYLE.get(source, _UNKNOWN)
    return colours[index % len(colours)], pattern
