"""Bounded labels: long names shortened for titles, the full name kept on hover; and ``bars_html``."""

from __future__ import annotations

import html
import math
from pathlib import PurePath
from typing import Iterable

import plotly.graph_objects as go

from labkit.bench import sig3

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
    """Caption the figure with the names ``short_name`` shortens (hover shows them in full); call after menus."""
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


def bars_html(items: list[tuple[str, float]], unit: str, *, log: bool | None = None, colour: str = "#1f5f99",
              highlight: tuple[str, ...] = (), caption: str = "") -> str:
    """A small horizontal bar chart: one bar per ``(label, value)``, the value printed at its end in
    ``unit``. ``log`` (default: when the values span more than 30x) scales the bars by log10; the
    caption then says so. Bars whose label is in ``highlight`` are drawn in orange. Plain HTML, no
    plotly: an answer box comes before its page sets plotly up, and needs no script."""
    items = [(lab, v if isinstance(v, int) else float(v)) for lab, v in items
             if v is not None and not (isinstance(v, float) and math.isnan(v))]  # an int is printed whole
    if not items:
        return ""
    positive = [v for _, v in items if v > 0]
    top = max((v for _, v in items), default=0.0)
    if log is None:
        log = bool(positive) and top / min(positive) > 30
    lo = math.log10(min(positive)) - 0.3 if log and positive else 0.0

    def width(v: float) -> float:
        if top <= 0 or v <= 0:
            return 0.0
        if log:
            return 80 * (math.log10(v) - lo) / (math.log10(top) - lo)  # room left for the value
        return 80 * v / top

    rows = "".join(
        f'<div style="display:flex;align-items:center;gap:6px;margin:1px 0">'
        f'<div style="flex:0 0 34%;text-align:right;font-size:12px;overflow-wrap:anywhere">{html.escape(str(lab))}</div>'
        f'<div style="flex:1 1 auto"><div style="width:{width(v):.1f}%;min-width:2px;height:12px;display:inline-block;'
        f'vertical-align:middle;background:{"#e67e22" if lab in highlight else colour}"></div>'
        f'<span style="font-size:12px;margin-left:4px">{html.escape(str(sig3(v)))} {html.escape(str(unit))}</span></div></div>'
        for lab, v in items)
    note = caption + (" (log scale)" if log else "")
    note_html = f'<div style="font-size:12px;color:#555">{html.escape(str(note))}</div>' if note else ""
    return f'<div class="labkit-answer-bars" style="max-width:640px;margin:6px 0">{note_html}{rows}</div>'


def no_result(text: str, title: str, height: int = 260) -> go.Figure:
    """The figure a plot returns when its result is not recorded: the title and how to record it."""
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig.update_layout(title=title, xaxis=dict(visible=False), yaxis=dict(visible=False), height=height)
