"""A single offline HTML report for a trace analysis (plotly.js embedded inline, no network requests).

``render_report(analysis, other=None)`` returns the page as a string: source, per-stream idle
by cause, the timeline (or a before/after pair), the host call sites ranked by the idle they
overlap, the largest bubbles, copies and their flags, and the HTA-compatible numbers.
plotly is imported only here (the analyzer core does not need it).
"""

from __future__ import annotations

import html

import pandas as pd

from labkit.trace.analysis.analyze import Analysis

_CSS = """
body{font-family:system-ui,sans-serif;margin:20px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:right;max-width:520px;overflow-wrap:anywhere}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.badge{display:inline-block;padding:2px 8px;border-radius:4px;color:#fff;font-size:12px}
.sim{background:#b35900}.gpu{background:#1b7f3a}.host{background:#1f5f99}
.flag{color:#a00;font-weight:bold}
"""


def _table(df: pd.DataFrame, top: int | None = None, floatfmt: str = "{:.3f}") -> str:
    if top is not None:
        df = df.head(top)
    if len(df) == 0:
        return "<p><i>none</i></p>"
    cols = list(df.columns)
    head = "".join(f"<th class='l'>{html.escape(str(c))}</th>" for c in cols)
    body = []
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            if isinstance(v, float):
                cells.append(f"<td>{floatfmt.format(v)}</td>")
            elif isinstance(v, (int,)) or hasattr(v, "dtype"):
                cells.append(f"<td>{html.escape(str(v))}</td>")
            else:
                cells.append(f"<td class='l'>{html.escape(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _source(an: Analysis) -> str:
    s = an.source
    cls, word = ("sim", "simulated") if s["simulated"] else (("gpu", "measured on a GPU") if s["has_device_events"]
                                                             else ("host", "host only"))
    items = [f"<span class='badge {cls}'>{word}</span>",
             f"<b>{html.escape(str(s['file']))}</b>", f"GPU: {html.escape(str(s.get('gpu') or 'none recorded'))}",
             f"{s['events']} events"]
    if s["skipped_events"]:
        items.append(f"<span class='flag'>{s['skipped_events']} malformed events skipped</span>")
    return "<p>" + " &middot; ".join(items) + "</p>"


def _section(an: Analysis, top: int) -> str:
    parts = [_source(an)]
    if not an.source["has_device_events"]:
        parts.append("<p>No device events in this trace: only host time is reported.</p>")
    parts.append("<h2>Device streams: busy and idle (us)</h2>" + _table(an.streams))
    parts.append(f"<h2>Host call sites during host-wait idle (top {top})</h2>"
                 "<p>Device idle time during which the launching thread was inside each call site "
                 "(innermost annotation, Python frame, CPU op, runtime call).</p>"
                 + _table(an.host_starvation[["call_site", "idle_overlap_us", "bubble_count", "share"]], top))
    big = an.bubbles.sort_values("dur_us", ascending=False).head(top)
    parts.append(f"<h2>Largest bubbles (top {top})</h2>" + _table(
        big[["device", "stream", "start_us", "dur_us", "category", "prev_op", "next_op", "call_site"]]))
    h = an.h2d
    parts.append(f"<h2>Host-to-device copies ({len(h)}: {int((h['kind'] == 'pageable').sum())} pageable, "
                 f"{int((h['kind'] == 'pinned').sum())} pinned)</h2>")
    for f in an.copies.flags:
        parts.append(f"<p class='flag'>repeated small pageable copies: {f['count']} copies ({f['bytes']} bytes, "
                     f"{f['host_stall_us']:.1f} us host stall) at {html.escape(f['call_site'])} "
                     f"- rule: {html.escape(f['rule'])}</p>")
    parts.append(_table(an.copies.by_call_site, top))
    parts.append("<h3>per step</h3>" + _table(an.copies.by_step))
    if len(an.steps):
        parts.append("<h2>Steps</h2>" + _table(an.steps))
    parts.append("<h2>HTA-compatible idle breakdown (us)</h2>" + _table(an.hta_compatible))
    parts.append(f"<h2>Device ops by total time (top {top})</h2>" + _table(an.kernels, top))
    return "\n".join(parts)


def render_report(analysis: Analysis, *, other: Analysis | None = None, top: int = 10) -> str:
    """The whole report as one HTML string (plotly.js inline; no external requests)."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    from labkit.viz.timeline import plot_idle_breakdown, plot_timeline, plot_timeline_pair

    if other is None:
        figs = [plot_idle_breakdown(analysis), plot_timeline(analysis)]
        title = f"Trace analysis: {analysis.source['file']}"
    else:
        figs = [plot_timeline_pair(analysis, other)]
        title = f"Trace comparison: {analysis.source['file']} vs {other.source['file']}"
    fig_html = "\n".join(pio.to_html(f, full_html=False, include_plotlyjs=False, include_mathjax=False,
                                     config={"displaylogo": False}) for f in figs)
    body = [f"<h1>{html.escape(title)}</h1>", fig_html]
    if other is None:
        body.append(_section(analysis, top))
    else:
        from labkit.trace.analysis.diff import diff_analyses

        d = diff_analyses(analysis, other)
        body.append("<h2>Before / after totals</h2>" + _table(d.totals))
        body.append(f"<h2>Host call sites: change in host-wait idle (top {top})</h2>" +
                    _table(d.call_sites[["call_site", "idle_overlap_us_before", "idle_overlap_us_after",
                                         "idle_overlap_us_delta"]], top))
        body.append("<h2>Copies</h2>" + _table(d.copies))
        body.append(f"<h2>Kernels: largest changes (top {top})</h2>" + _table(d.kernels, top))
        body.append("<h1>Before</h1>" + _section(analysis, top))
        body.append("<h1>After</h1>" + _section(other, top))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title>"
            f"<style>{_CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            + "\n".join(body) + "</body></html>\n")
