"""Bounded labels: long names (trace files, paths) shortened for titles, the full name kept on hover.

Plotly never wraps a title, so a 60-character trace file name in a title runs off a narrow
figure. ``short_name`` keeps a name's start and end around an ellipsis (the end of a file
name, its suffix, is as telling as the start); ``add_full_names`` puts the names that were
shortened back on the figure as a small caption whose hover text lists them in full.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Iterable

import plotly.graph_objects as go

#: longest name (characters) left whole in a title
NAME_CHARS = 36
ELLIPSIS = "…"
#: name of the caption annotation ``add_full_names`` adds (one per figure)
CAPTION_NAME = "full-names"


def shorten(text: str, max_chars: int = NAME_CHARS) -> str:
    """``text`` cut in the middle to at most ``max_chars`` characters (head + ``…`` + tail)."""
    if max_chars < 3:
        raise ValueError(f"max_chars must be at least 3, got {max_chars}")
    text = str(text)
    if len(text) <= max_chars:
        return text
    keep = max_chars - len(ELLIPSIS)
    head = (keep + 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (keep - head):]


def short_name(name: str | None, max_chars: int = NAME_CHARS, default: str = "trace") -> str:
    """A file name or path for a title: the last path component, shortened to ``max_chars``."""
    if not name:
        return default
    return shorten(PurePath(str(name)).name or str(name), max_chars)


def _right_menu(fig: go.Figure) -> bool:
    """True when an update menu sits at the top right, where the caption would go."""
    return any((m.x if m.x is not None else -1) >= 0.9 and (m.xanchor in ("right", None, "auto"))
               for m in (fig.layout.updatemenus or ()))


def add_full_names(fig: go.Figure, names: Iterable[str | None], max_chars: int = NAME_CHARS, *,
                   label: str = "full name") -> go.Figure:
    """Caption the figure with the names ``short_name`` shortens (hover shows them in full).

    Names that fit are left alone (nothing is added when none was shortened). The caption,
    ``(hover: full name)``, sits at the top right just above the plot area (left of a
    dropdown placed there; call this after adding menus) and replaces an earlier one.
    """
    full = [str(n) for n in dict.fromkeys(n for n in names if n)
            if short_name(n, max_chars) != str(n)]
    kept = [a for a in (fig.layout.annotations or ()) if a.name != CAPTION_NAME]
    fig.layout.annotations = kept
    if not full:
        return fig
    fig.add_annotation(
        name=CAPTION_NAME, text=f"(hover: {label}{'s' if len(full) > 1 else ''})", hovertext="<br>".join(full),
        xref="paper", yref="paper", x=1, y=1, xanchor="right", yanchor="bottom", yshift=2,
        xshift=-150 if _right_menu(fig) else 0, showarrow=False, font=dict(size=10, color="#555"),
    )
    return fig


def legend_below(fig: go.Figure, *, gap_px: int = 56, legend_px: int = 48) -> go.Figure:
    """Put the legend in a row of its own below the plot, clear of the x axis's ticks and title.

    The legend's top sits ``gap_px`` below the plot area (room for tick labels and the axis
    title); the figure grows by ``legend_px`` and its bottom margin holds both, so the plot keeps
    its height. Call after the figure's height and top margin are set.
    """
    height = fig.layout.height or 450
    top = fig.layout.margin.t if fig.layout.margin.t is not None else 100
    bottom = gap_px + legend_px
    height += legend_px
    plot_px = max(height - top - bottom, 60)
    fig.update_layout(height=height, margin=dict(b=bottom),
                      legend=dict(orientation="h", x=0, xanchor="left", yanchor="top", y=-gap_px / plot_px))
    return fig
