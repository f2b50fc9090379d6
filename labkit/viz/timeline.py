"""Timeline figures: host threads and device streams as lanes, idle gaps highlighted, steps to zoom to.

``plot_timeline(trace_or_analysis)`` draws kernels, copies, memsets, annotations, CPU ops and
runtime calls as horizontal bars (``go.Bar`` with ``base``; no shapes, so big traces stay
fast) and the device idle gaps on each stream (host-wait gaps in red, others grey). A dropdown
zooms to each ``ProfilerStep`` (host span extended to the end of the device work it launched).
``plot_timeline_pair(before, after)`` stacks two runs for a before/after view. Times are in ms
from the start of each trace. Simulated traces say so in the title.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.trace.analyze import Analysis, analyze_trace
from labkit.trace.load import Trace

MAX_EVENTS = 20_000  #: most bars drawn per figure (largest first); gaps are always drawn first

_STYLE = {
    "kernel": ("#1f77b4", "kernel"),
    "gpu_memcpy": ("#ff7f0e", "memcpy"),
    "gpu_memset": ("#8c564b", "memset"),
    "user_annotation": ("#2ca02c", "annotation"),
    "cpu_op": ("#9467bd", "CPU op"),
    "runtime": ("#17becf", "runtime call"),
    "host_wait": ("#d62728", "idle: host wait"),
    "idle": ("#b0b0b0", "idle: other / kernel wait"),
}


def _as_analysis(obj) -> Analysis:
    if isinstance(obj, Analysis):
        return obj
    if isinstance(obj, Trace):
        return analyze_trace(obj)
    return analyze_trace(obj)


def _origin(an: Analysis) -> float:
    ev = an.trace.events
    return float(ev["ts_us"].min()) if len(ev) else 0.0


def _lanes(an: Analysis) -> tuple[list[str], pd.DataFrame]:
    """Rows to draw: lane, kind, start_ms, dur_ms, label (host lanes first, then streams)."""
    t0 = _origin(an)
    ops = an.ops
    frames = []
    if len(ops):
        lane = "GPU " + ops["device"].astype(str) + " stream " + ops["stream"].astype(str)
        kind = ops["cat"].where(ops["cat"].isin(["kernel", "gpu_memcpy", "gpu_memset"]), "kernel")
        frames.append(pd.DataFrame({"lane": lane, "kind": kind, "start_ms": (ops["ts_us"] - t0) / 1e3,
                                    "dur_ms": ops["dur_us"] / 1e3, "label": ops["name"], "prio": 1}))
    b = an.bubbles
    if len(b):
        lane = "GPU " + b["device"].astype(str) + " stream " + b["stream"].astype(str)
        kind = np.where(b["category"] == "host_wait", "host_wait", "idle")
        label = b["category"] + ": " + b["call_site"].fillna("").astype(str)
        frames.append(pd.DataFrame({"lane": lane, "kind": kind, "start_ms": (b["start_us"] - t0) / 1e3,
                                    "dur_ms": b["dur_us"] / 1e3, "label": label, "prio": 0}))
    ev = an.trace.events
    threads = set(zip(ops["launch_pid"], ops["launch_tid"])) if len(ops) else set()
    host_cats = {"user_annotation": "user_annotation", "cpu_op": "cpu_op", "cuda_runtime": "runtime",
                 "cuda_driver": "runtime"}
    h = ev[ev["cat"].isin(list(host_cats))]
    if threads:
        keep = pd.Series(list(zip(h["pid"], h["tid"])), index=h.index).isin(threads)
        h = h[keep.to_numpy()]
    if len(h):
        frames.append(pd.DataFrame({
            "lane": "host " + h["pid"].astype(str) + "/" + h["tid"].astype(str),
            "kind": h["cat"].astype(str).map(host_cats).to_numpy(),
            "start_ms": (h["ts_us"] - t0).to_numpy() / 1e3, "dur_ms": h["dur_us"].to_numpy() / 1e3,
            "label": h["name"].astype(str).to_numpy(), "prio": 2}))
    if not frames:
        return [], pd.DataFrame(columns=["lane", "kind", "start_ms", "dur_ms", "label", "prio"])
    rows = pd.concat(frames, ignore_index=True)
    lanes = sorted(rows["lane"].unique(), key=lambda s: (not s.startswith("host"), s))
    return lanes, rows


def _cap(rows: pd.DataFrame, max_events: int) -> pd.DataFrame:
    if len(rows) <= max_events:
        return rows
    return rows.sort_values(["prio", "dur_ms"], ascending=[True, False], kind="stable").head(max_events)


def _bars(rows: pd.DataFrame, showlegend: bool = True) -> list[go.Bar]:
    out = []
    for kind, (colour, name) in _STYLE.items():
        r = rows[rows["kind"] == kind]
        if len(r) == 0:
            continue
        out.append(go.Bar(
            x=r["dur_ms"].to_numpy(), base=r["start_ms"].to_numpy(), y=r["lane"].to_numpy(), orientation="h",
            marker=dict(color=colour, line=dict(width=0)), name=name, legendgroup=name, showlegend=showlegend,
            text=r["label"].str.slice(0, 120).to_numpy(), textposition="none",
            hovertemplate="%{text}<br>start %{base:.3f} ms, %{x:.4f} ms<extra>" + name + "</extra>"))
    return out


def step_ranges(an: Analysis) -> list[tuple[str, float, float]]:
    """``(name, start_ms, end_ms)`` per step: the host span, extended to the end of the device work launched in it."""
    t0 = _origin(an)
    steps = an.steps
    out = []
    ops = an.ops
    for r in steps.itertuples():
        end = r.start_us + r.dur_us
        if len(ops):
            launched = ops["launch_ts_us"].between(r.start_us, r.start_us + r.dur_us)
            if launched.any():
                end = max(end, float(ops.loc[launched, "end_us"].max()))
        out.append((r.name, (r.start_us - t0) / 1e3, (end - t0) / 1e3))
    return out


def _title(an: Analysis, title: str | None) -> str:
    s = an.source
    base = title or f"{s.get('file') or 'trace'} ({s.get('gpu') or 'no GPU recorded'})"
    if s.get("simulated"):
        base += " - SIMULATED device timeline"
    return base


def plot_timeline(trace_or_analysis, *, max_events: int = MAX_EVENTS, title: str | None = None) -> go.Figure:
    """Lanes for host threads and device streams with idle gaps highlighted and a step dropdown."""
    an = _as_analysis(trace_or_analysis)
    lanes, rows = _lanes(an)
    rows = _cap(rows, max_events)
    fig = go.Figure(_bars(rows))
    n_shown, n_all = len(rows), len(_lanes(an)[1]) if len(rows) >= max_events else len(rows)
    sub = f"<br><sup>{n_shown} of {n_all} bars drawn (largest first)</sup>" if n_shown < n_all else ""
    fig.update_layout(
        title=_title(an, title) + sub, barmode="overlay", bargap=0.25, height=160 + 28 * max(len(lanes), 1),
        xaxis_title="time since trace start (ms)", legend=dict(orientation="h", y=-0.15), margin=dict(l=10, r=10, t=70),
    )
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)), automargin=True)
    steps = step_ranges(an)
    if steps:
        buttons = [dict(label="whole trace", method="relayout", args=[{"xaxis.autorange": True}])]
        for name, a, b in steps:
            pad = 0.02 * (b - a)
            buttons.append(dict(label=name, method="relayout", args=[{"xaxis.range": [a - pad, b + pad]}]))
        fig.update_layout(updatemenus=[dict(type="dropdown", buttons=buttons, x=1.0, xanchor="right", y=1.12, yanchor="top")])
    if an.source.get("simulated"):
        fig.add_annotation(text="simulated", xref="paper", yref="paper", x=0, y=1.08, showarrow=False,
                           font=dict(color="#b35900"))
    return fig


def plot_timeline_pair(before, after, *, labels: tuple[str, str] = ("before", "after"),
                       max_events: int = MAX_EVENTS, title: str | None = None) -> go.Figure:
    """Two runs stacked (shared time axis from each trace's start) for a before/after view."""
    a, b = _as_analysis(before), _as_analysis(after)
    la, ra = _lanes(a)
    lb, rb = _lanes(b)
    sim = a.source.get("simulated") or b.source.get("simulated")
    subtitles = [f"{labels[0]}: {_title(a, None)}", f"{labels[1]}: {_title(b, None)}"]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=subtitles,
                        row_heights=[max(len(la), 1), max(len(lb), 1)])
    for tr in _bars(_cap(ra, max_events // 2)):
        fig.add_trace(tr, row=1, col=1)
    for tr in _bars(_cap(rb, max_events // 2), showlegend=False):
        fig.add_trace(tr, row=2, col=1)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(la)), automargin=True, row=1, col=1)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lb)), automargin=True, row=2, col=1)
    full = title or "before / after"
    if sim:
        full += " - SIMULATED device timeline"
    fig.update_layout(title=full, barmode="overlay", height=220 + 28 * (len(la) + len(lb)),
                      legend=dict(orientation="h", y=-0.1), margin=dict(l=10, r=10, t=80))
    fig.update_xaxes(title_text="time since trace start (ms)", row=2, col=1)
    return fig


def plot_idle_breakdown(analysis) -> go.Figure:
    """Stacked bars of idle time per stream split by cause (host wait, kernel wait, other), in ms."""
    an = _as_analysis(analysis)
    s = an.streams
    lanes = ("GPU " + s["device"].astype(str) + " stream " + s["stream"].astype(str)).to_numpy()
    fig = go.Figure()
    for col, name, colour in (("idle_host_wait_us", "host wait", "#d62728"),
                              ("idle_kernel_wait_us", "kernel wait", "#ff9896"),
                              ("idle_other_us", "other", "#b0b0b0")):
        fig.add_trace(go.Bar(x=lanes, y=s[col].to_numpy() / 1e3, name=name, marker_color=colour))
    t = "Device idle time by cause"
    if an.source.get("simulated"):
        t += " (SIMULATED)"
    fig.update_layout(barmode="stack", title=t, yaxis_title="idle (ms)")
    return fig
