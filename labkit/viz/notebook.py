"""Notebook set-up shared by every lab notebook: offline plotly, source badges, folded detail."""

from __future__ import annotations

import html

from labkit.device import SOURCES

#: output metadata key the report builder reads
SOURCES_METADATA_KEY = "labkit_sources"

#: a source's badge colour (the report's index and pages use the same)
SOURCE_COLOURS = {
    "measured-gpu": "#1b7f3a",
    "measured-cpu": "#1f5f99",
    "simulated": "#b35900",
    "interpreted": "#6b4c9a",
}


def setup_notebook() -> None:
    """Use a plotly renderer that embeds plotly.js in exported HTML (works offline); the results the
    notebook measures keep the unit costs of its run (:func:`labkit.results.keep_unit_costs`)."""
    import plotly.io as pio

    from labkit.results import keep_unit_costs

    pio.renderers.default = "plotly_mimetype+notebook"
    keep_unit_costs()


def sources_badge_html(sources) -> str:
    parts = [f'<span class="labkit-source" data-source="{s}" style="background:{SOURCE_COLOURS[s]};color:white;'
             f'padding:2px 8px;border-radius:4px;margin-right:6px;font-family:sans-serif;font-size:12px">{s}</span>'
             for s in sources]
    return '<div class="labkit-sources">numbers on this page: ' + "".join(parts) + "</div>"


def declare_sources(*sources: str) -> None:
    """Display a badge for each source and tag the output for the report index (nothing where none is
    given: a section whose recorded results are missing declares no numbers)."""
    bad = [s for s in sources if s not in SOURCES]
    if bad:
        raise ValueError(f"sources must be among {SOURCES}, got {sources}")
    if not sources:
        return
    from IPython.display import HTML, display

    display(HTML(sources_badge_html(sources)), metadata={SOURCES_METADATA_KEY: list(sources)})


class Folded:
    """Appendix material behind a ``<details>`` click (what :func:`fold` returns; HTML in notebooks)."""

    def __init__(self, summary: str, items: tuple):
        self.summary, self.items = summary, items

    def _repr_html_(self) -> str:
        parts = [item._repr_html_() if hasattr(item, "_repr_html_") else f"<pre>{html.escape(str(item))}</pre>"
                 for item in self.items if item is not None]
        return f'<details class="labkit-fold"><summary>{html.escape(self.summary)}</summary>{"".join(parts)}</details>'


def fold(summary: str, *items) -> Folded:
    """``items`` (objects with an HTML view, e.g. :func:`labkit.bench.format_table`'s tables,
    or text shown as it is) folded behind one line, ``summary``."""
    return Folded(summary, items)
