"""Figures a reader explores without a kernel: bars over recorded results, the slice picked by a slider
and a menu inside the figure (the notebooks' "Try it live" sections).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from labkit.bench import sig3
from labkit.viz.labels import no_result


def _ordered(values) -> list:
    """Unique values in order: sorted where they are all numbers, else as they come."""
    unique = list(dict.fromkeys(values))
    return sorted(unique) if all(isinstance(v, (int, float)) for v in unique) else unique


def _wrap(label, width: int = 16) -> str:
    """``label`` broken into lines of about ``width`` characters at spaces (a bar label that would
    otherwise be drawn slanted, over the slider)."""
    lines: list[str] = []
    for word in str(label).split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def plot_explorer(rows: list[dict], *, x: str, y: str, title: str, y_title: str, slider: str | None = None,
                  menu: str | None = None, names: dict[str, str] | None = None, start: dict | None = None,
                  unit: str = "", log_y: bool = False, highlight: tuple = (), reference: tuple | None = None,
                  height: int = 500) -> go.Figure:
    """Bars of ``y`` per ``x`` for one ``(menu, slider)`` slice of ``rows`` at a time.

    ``names``: how the controls call a column (``{"num_seqs": "sequences"}``); ``start``: the slice
    shown first (``{"num_seqs": 128}``; default: the first menu value, the last slider value);
    ``unit``: printed after each bar's value; ``highlight``: ``x`` labels drawn in orange;
    ``reference``: ``(value, label)`` of a dashed horizontal line (e.g. the device step)."""
    rows = [r for r in rows if r.get(y) is not None]
    if not rows:
        return no_result("no recorded result to explore", title, height=300)
    names, start = names or {}, start or {}
    menus = _ordered(r[menu] for r in rows) if menu else [None]
    slides = {m: _ordered(r[slider] for r in rows if menu is None or r[menu] == m) if slider else [None]
              for m in menus}
    keys = [(m, s) for m in menus for s in slides[m]]
    first = start.get(menu, menus[0]) if start.get(menu, menus[0]) in menus else menus[0]

    def default(m):
        want = start.get(slider)
        return want if want in slides[m] else slides[m][-1]

    fig = go.Figure()
    for m, s in keys:
        pick = [r for r in rows if (menu is None or r[menu] == m) and (slider is None or r[slider] == s)]
        fig.add_bar(x=[_wrap(r[x]) for r in pick], y=[r[y] for r in pick], cliponaxis=False,
                    text=[f"{sig3(r[y])}{' ' + unit if unit else ''}" for r in pick], textposition="outside",
                    marker_color=["#e67e22" if r[x] in highlight else "#1f5f99" for r in pick],
                    name=" ".join(str(v) for v in (m, s) if v is not None), visible=(m, s) == (first, default(first)),
                    hovertemplate="%{text}<extra></extra>")

    def shown(key) -> list[bool]:
        return [k == key for k in keys]

    def slider_of(m) -> dict:
        steps = [dict(method="update", label=str(s), args=[{"visible": shown((m, s))}]) for s in slides[m]]
        return dict(active=slides[m].index(default(m)), steps=steps, pad=dict(t=50),
                    currentvalue=dict(prefix=f"{names.get(slider, slider)}: "))

    layout = dict(title=title, yaxis=dict(title=y_title, type="log" if log_y else "linear"), showlegend=False,
                  height=height, margin=dict(t=110 if menu else 70))
    if slider:
        layout["sliders"] = [slider_of(first)]
    if menu:
        buttons = [dict(label=f"{names.get(menu, menu)}: {m}", method="update",
                        args=[{"visible": shown((m, default(m)))}, {"sliders": [slider_of(m)]} if slider else {}])
                   for m in menus]
        layout["updatemenus"] = [dict(buttons=buttons, active=menus.index(first), x=0.0, y=1.18, xanchor="left")]
    fig.update_layout(**layout)
    if reference is not None:  # an annotation on a log axis is placed in log10 units, a shape is not
        fig.add_hline(y=reference[0], line_dash="dash")
        fig.add_annotation(text=reference[1], x=1, xref="paper", xanchor="right", yanchor="bottom", showarrow=False,
                           y=math.log10(reference[0]) if log_y else reference[0])
    return fig
