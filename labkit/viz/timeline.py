"""Timeline figures: host threads and device streams as lanes, idle gaps highlighted, steps to zoom to.

More: docs/reference.md, ``labkit.viz.timeline``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.trace.analysis.trace import Trace
from labkit.viz.labels import add_full_names, legend_below, short_name

MAX_EVENTS = 6_000  #: most bars drawn per figure (merged at a resolution, see ``decimate``)
STEP_FRACTION = 0.01  #: coarsest merge resolution, as a fraction of the median step (or of the trace)
FINEST_GAP_US = 1.0  #: the first resolution tried when bars must be merged (doubled until they fit)

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


def _as_trace(obj) -> Trace:
    return obj if isinstance(obj, Trace) else Trace(obj)


def _origin(an: Trace) -> float:
    ev = an.tables.events
    return float(ev["ts_us"].min()) if len(ev) else 0.0


def _lanes(an: Trace) -> tuple[list[str], pd.DataFrame]:
    """Rows to draw: lane, kind, start_ms, dur_ms, label (host lanes first, then streams)."""
    t0 = _origin(an)
    ops = an.ops()
    frames = []
    if len(ops):
        lane = "GPU " + ops["device"].astype(str) + " stream " + ops["stream"].astype(str)
        kind = ops["cat"].where(ops["cat"].isin(["kernel", "gpu_memcpy", "gpu_memset"]), "kernel")
        frames.append(pd.DataFrame({"lane": lane, "kind": kind, "start_ms": (ops["ts_us"] - t0) / 1e3,
                                    "dur_ms": ops["dur_us"] / 1e3, "label": ops["name"], "prio": 1}))
    b = an.bubbles()
    if len(b):
        lane = "GPU " + b["device"].astype(str) + " stream " + b["stream"].astype(str)
        kind = np.where(b["category"] == "host_wait", "host_wait", "idle")
        label = b["category"] + ": " + b["call_site"].fillna("").astype(str)
        frames.append(pd.DataFrame({"lane": lane, "kind": kind, "start_ms": (b["start_us"] - t0) / 1e3,
                                    "dur_ms": b["dur_us"] / 1e3, "label": label, "prio": 0}))
    ev = an.tables.events
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


def _sorted_keys(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(order, key)``: the row order by lane, kind and start (stable) and each sorted row's
    integer (lane, kind) group (codes follow the sorted lane and kind names)."""
    lane = pd.factorize(rows["lane"].to_numpy(object), sort=True)[0]
    kind = pd.factorize(rows["kind"].to_numpy(object), sort=True)[0]
    key = lane.astype(np.int64) * (int(kind.max()) + 1) + kind
    order = np.lexsort((rows["start_ms"].to_numpy(float), key))
    return order, key[order]


def _chain_ids(start: np.ndarray, end: np.ndarray, key: np.ndarray, min_gap_ms: float) -> np.ndarray:
    """Chain number of each sorted bar: a bar starts a new chain when it is its group's first or
    starts at least ``min_gap_ms`` after the furthest end of the earlier bars of its group."""
    reach = pd.Series(end).groupby(key).cummax().to_numpy(float)
    prev = np.empty_like(reach)
    prev[0] = np.nan
    prev[1:] = reach[:-1]
    prev[1:][key[1:] != key[:-1]] = np.nan
    new_chain = np.isnan(prev) | (start - prev >= min_gap_ms)
    return np.cumsum(new_chain)


def merge_close(rows: pd.DataFrame, min_gap_ms: float) -> pd.DataFrame:
    """Bars of one lane and kind less than ``min_gap_ms`` apart merged into one (``n``, ``busy_frac``).

    Every gap of at least ``min_gap_ms`` between a lane's bars is left exactly as it was.
    """
    if not len(rows):
        return rows.assign(n=pd.Series(dtype=int), busy_frac=pd.Series(dtype=float))
    order, key = _sorted_keys(rows)
    df = rows.iloc[order].reset_index(drop=True)
    start = df["start_ms"].to_numpy(float)
    end = start + df["dur_ms"].to_numpy(float)
    chain = _chain_ids(start, end, key, min_gap_ms)
    df["end_ms"] = end
    g = df.groupby(chain, sort=False)
    longest = df["label"].to_numpy(object)[g["dur_ms"].idxmax().to_numpy()]
    firsts = np.flatnonzero(np.r_[True, chain[1:] != chain[:-1]])
    out = pd.DataFrame({
        "lane": df["lane"].to_numpy(object)[firsts], "kind": df["kind"].to_numpy(object)[firsts],
        "start_ms": g["start_ms"].min().to_numpy(), "end_ms": g["end_ms"].max().to_numpy(),
        "busy_ms": g["dur_ms"].sum().to_numpy(), "n": np.diff(np.r_[firsts, len(df)]),
        "label": [str(x) for x in longest], "prio": df["prio"].to_numpy()[firsts],
    })
    out["dur_ms"] = out["end_ms"] - out["start_ms"]
    span = out["dur_ms"].where(out["dur_ms"] > 0)
    out["busy_frac"] = (out["busy_ms"] / span).clip(upper=1.0).fillna(1.0)
    many = (out["n"] > 1).to_numpy()
    if many.any():
        m = out[many]
        noun = np.where(m["prio"] == 0, "gaps", "ops")
        pct = (100 * m["busy_frac"]).round().astype(int).to_numpy()
        out.loc[many, "label"] = [f"{n} {w} merged ({p}% of the span); longest: {lab[:60]}"
                                  for n, w, p, lab in zip(m["n"].tolist(), noun, pct.tolist(), m["label"].tolist())]
    return out[["lane", "kind", "start_ms", "dur_ms", "label", "prio", "n", "busy_frac"]]


def decimate(rows: pd.DataFrame, max_bars: int, max_gap_ms: float) -> tuple[pd.DataFrame, float]:
    """At most about ``max_bars`` bars, merged at the finest resolution that fits; returns ``(rows, ms)``.

    Resolutions from ``FINEST_GAP_US`` doubling up to ``max_gap_ms`` are tried. Idle-gap bars
    (``prio`` 0) at least as long as the resolution are kept as they are; shorter ones merge
    among themselves, as busy bars do (``merge_close``). The resolution is 0.0 when nothing had
    to merge. Where even ``max_gap_ms`` leaves too many bars, all of them are returned (the
    caller's cap drops the shortest).
    """
    if len(rows) <= max_bars or max_gap_ms <= 0:
        return rows, 0.0
    # the bar count at each resolution from the sorted columns; the bars are built once, at the end
    order, key = _sorted_keys(rows)
    start = rows["start_ms"].to_numpy(float)[order]
    dur = rows["dur_ms"].to_numpy(float)[order]
    end = start + dur
    gaps = (rows["prio"] == 0).to_numpy()[order]
    res = min(FINEST_GAP_US / 1e3, max_gap_ms)
    while True:
        rest = ~(gaps & (dur >= res))
        n = int(len(rest) - rest.sum()) + (int(_chain_ids(start[rest], end[rest], key[rest], res)[-1])
                                           if rest.any() else 0)
        if n <= max_bars or res >= max_gap_ms:
            break
        res = min(2 * res, max_gap_ms)
    long_gap = (rows["prio"] == 0) & (rows["dur_ms"] >= res)
    kept = rows[long_gap].assign(n=1, busy_frac=1.0)
    return pd.concat([kept, merge_close(rows[~long_gap], res)], ignore_index=True), res


def max_resolution_ms(an: Trace) -> float:
    """The coarsest merge resolution for ``an``: ``STEP_FRACTION`` of its median step span, in ms
    (of the whole trace when it has no steps)."""
    steps = step_ranges(an)
    if steps:
        return STEP_FRACTION * float(np.median([b - a for _, a, b in steps]))
    ev = an.tables.events
    if not len(ev):
        return 0.0
    return STEP_FRACTION * float((ev["ts_us"] + ev["dur_us"].fillna(0)).max() - ev["ts_us"].min()) / 1e3


def _cap(rows: pd.DataFrame, max_events: int, max_gap_ms: float = 0.0) -> pd.DataFrame:
    """Rows merged (``decimate``) then, if still too many, the longest kept (idle gaps first)."""
    rows, _ = decimate(rows, max_events, max_gap_ms)
    if len(rows) <= max_events:
        return rows
    return rows.sort_values(["prio", "dur_ms"], ascending=[True, False], kind="stable").head(max_events)


def _subtitle(n_all: int, n_merged: int, n_drawn: int, res_ms: float) -> str:
    """Says how ``n_all`` bars became ``n_merged`` (at ``res_ms``) and then ``n_drawn`` (longest kept)."""
    if n_drawn >= n_all:
        return ""
    how = f"merged at {res_ms * 1e3:.3g} us: every gap of at least that is drawn" if res_ms else ""
    if n_drawn < n_merged:
        how += ("; then " if how else "") + f"the {n_drawn} longest of {n_merged} kept"
    return f"<br><sup>{n_all} bars drawn as {n_drawn} ({how})</sup>"


def _bars(rows: pd.DataFrame, showlegend: bool = True) -> list[go.Bar]:
    out = []
    for kind, (colour, name) in _STYLE.items():
        r = rows[rows["kind"] == kind]
        if len(r) == 0:
            continue
        marker = dict(color=colour, line=dict(width=0))
        if "busy_frac" in r and (r["busy_frac"] < 1).any():  # a merged bar is as opaque as it is full
            marker["opacity"] = (0.3 + 0.7 * r["busy_frac"].to_numpy(float)).round(2)
        out.append(go.Bar(
            x=r["dur_ms"].to_numpy(), base=r["start_ms"].to_numpy(), y=r["lane"].to_numpy(), orientation="h",
            marker=marker, name=name, legendgroup=name, showlegend=showlegend,
            text=r["label"].astype(str).str.slice(0, 120).to_numpy(), textposition="none",
            hovertemplate="%{text}<br>start %{base:.3f} ms, %{x:.4f} ms<extra>" + name + "</extra>"))
    return out


def step_ranges(an: Trace) -> list[tuple[str, float, float]]:
    """``(name, start_ms, end_ms)`` per step: the host span, extended to the end of the device work launched in it."""
    t0 = _origin(an)
    steps = an.steps()
    out = []
    ops = an.ops()
    for r in steps.itertuples():
        end = r.start_us + r.dur_us
        if len(ops):
            launched = ops["launch_ts_us"].between(r.start_us, r.start_us + r.dur_us)
            if launched.any():
                end = max(end, float(ops.loc[launched, "end_us"].max()))
        out.append((r.name, (r.start_us - t0) / 1e3, (end - t0) / 1e3))
    return out


def _title(an: Trace, title: str | None) -> str:
    s = an.source()
    base = title or f"{short_name(s.get('file'))} ({s.get('gpu') or 'no GPU recorded'})"
    if s.get("simulated"):
        base += " - SIMULATED device timeline"
    return base


def plot_timeline(trace, *, max_events: int = MAX_EVENTS, title: str | None = None) -> go.Figure:
    """Lanes for host threads and device streams with idle gaps highlighted and a step dropdown."""
    an = _as_trace(trace)
    lanes, all_rows = _lanes(an)
    merged, res = decimate(all_rows, max_events, max_resolution_ms(an))
    rows = _cap(merged, max_events)
    fig = go.Figure(_bars(rows))
    sub = _subtitle(len(all_rows), len(merged), len(rows), res)
    fig.update_layout(
        title=_title(an, title) + sub, barmode="overlay", bargap=0.25, height=160 + 28 * max(len(lanes), 1),
        xaxis_title="time since trace start (ms)", margin=dict(l=10, r=10, t=70),
    )
    legend_below(fig)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)), automargin=True)
    steps = step_ranges(an)
    if steps:
        buttons = [dict(label="whole trace", method="relayout", args=[{"xaxis.autorange": True}])]
        for name, a, b in steps:
            pad = 0.02 * (b - a)
            buttons.append(dict(label=name, method="relayout", args=[{"xaxis.range": [a - pad, b + pad]}]))
        fig.update_layout(updatemenus=[dict(type="dropdown", buttons=buttons, x=1.0, xanchor="right", y=1.12, yanchor="top")])
    if an.source().get("simulated"):
        fig.add_annotation(text="simulated", xref="paper", yref="paper", x=0, y=1.08, showarrow=False,
                           font=dict(color="#b35900"))
    return add_full_names(fig, [] if title else [an.source().get("file")])


def _subplot_title(label: str, an: Trace) -> str:
    """A subplot's title: the caller's label and where the trace ran (the file name goes to the caption's hover)."""
    s = an.source()
    where = "SIMULATED device" if s.get("simulated") else (s.get("gpu") or "no GPU recorded")
    return f"{label} · {where}"


def plot_timeline_pair(before, after, *, labels: tuple[str, str] = ("before", "after"),
                       max_events: int = MAX_EVENTS, title: str | None = None) -> go.Figure:
    """Two runs stacked (shared time axis from each trace's start) for a before/after view."""
    a, b = _as_trace(before), _as_trace(after)
    la, ra = _lanes(a)
    lb, rb = _lanes(b)
    sim = a.source().get("simulated") or b.source().get("simulated")
    subtitles = [_subplot_title(label, an) for label, an in zip(labels, (a, b))]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=subtitles,
                        row_heights=[max(len(la), 1), max(len(lb), 1)])
    fig.add_traces(_bars(_cap(ra, max_events // 2, max_resolution_ms(a))), rows=1, cols=1)
    fig.add_traces(_bars(_cap(rb, max_events // 2, max_resolution_ms(b)), showlegend=False), rows=2, cols=1)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(la)), automargin=True, row=1, col=1)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lb)), automargin=True, row=2, col=1)
    full = title or "before / after"
    if sim:
        full += " - SIMULATED device timeline"
    fig.update_layout(title=full, barmode="overlay", height=220 + 28 * (len(la) + len(lb)),
                      margin=dict(l=10, r=10, t=80))
    legend_below(fig)
    fig.update_xaxes(title_text="time since trace start (ms)", row=2, col=1)
    add_full_names(fig, [a.source().get("file"), b.source().get("file")])
    return fig


def plot_idle_breakdown(trace) -> go.Figure:
    """Stacked bars of idle time per stream split by cause (host wait, kernel wait, other), in ms.

    ``trace``: one ``Trace`` (or path), or ``{label: trace}`` to set runs side by side (one bar per
    run and stream, the label first)."""
    runs = trace if isinstance(trace, dict) else {"": trace}
    runs = {label: _as_trace(a) for label, a in runs.items()}
    lanes, parts = [], []
    for label, an in runs.items():
        s = an.idle()
        names = ("GPU " + s["device"].astype(str) + " stream " + s["stream"].astype(str)).tolist()
        lanes += [f"{label}<br>{n}" if label else n for n in names]
        parts.append(s)
    fig = go.Figure()
    for col, name, colour in (("idle_host_wait_us", "host wait", "#d62728"),
                              ("idle_kernel_wait_us", "kernel wait", "#ff9896"),
                              ("idle_other_us", "other", "#b0b0b0")):
        values = [v / 1e3 for s in parts for v in s[col].tolist()]
        fig.add_trace(go.Bar(x=lanes, y=values, name=name, marker_color=colour))
    t = "Device idle time by cause"
    if any(an.source().get("simulated") for an in runs.values()):
        t += " (SIMULATED)"
    fig.update_layout(barmode="stack", title=t, yaxis_title="idle (ms)")
    return fig
