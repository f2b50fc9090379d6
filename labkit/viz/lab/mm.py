"""Figures for the scheduler half (#40143): placeholder calls, decode steps, sweeps, the bubble model.

Every function takes result rows (as stored by ``labkit bench mm``) and returns a
``plotly.graph_objects.Figure``; none shows it. Rows may come from several machines (a
``machine`` column from ``labkit.results.results_rows``); the source of every number is
named in the title or legend, and model predictions are labelled simulated.
"""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.mm.overlap import PR40143, PublishedResult

__all__ = [
    "COMBO_LABELS",
    "plot_placeholder_calls",
    "plot_decode_step",
    "plot_sweep",
    "plot_before_after",
    "plot_bubble_model",
    "plot_step_timeline",
    "plot_workload",
]

#: legend names for (variant+strategy) combos
COMBO_LABELS = {
    "tensor+loop": "before #40143 (tensor cumsum, visit all)",
    "list+loop": "#40143 (list cumsum, visit all)",
    "fast+loop": "fast placeholder, visit all",
    "list+window": "bisect window (vLLM 0.33 style)",
    "list+cursor": "cursor (this lab)",
    "fast+cursor": "fast placeholder + cursor (this lab)",
}
_COLOURS = {
    "tensor+loop": "#c0392b", "list+loop": "#e67e22", "fast+loop": "#f1c40f",
    "list+window": "#8e44ad", "list+cursor": "#2980b9", "fast+cursor": "#16a085",
}


def _label(combo: str) -> str:
    return COMBO_LABELS.get(combo, combo)


def _sources(rows) -> str:
    found = sorted({r.get("source", "?") for r in rows if r.get("source")} or {"measured-cpu"})
    return ", ".join(found)


def _machines(rows) -> list[str]:
    return sorted({r.get("machine", "this machine") for r in rows})


def plot_placeholder_calls(rows: list[dict]) -> go.Figure:
    """Grouped bars: per-call host time (ns, log scale) of each placeholder method, per variant."""
    fig = go.Figure()
    for variant in dict.fromkeys(r["variant"] for r in rows):
        sub = [r for r in rows if r["variant"] == variant]
        names = [f"{r['method']}<br>({r.get('machine', '')})" if len(_machines(rows)) > 1 else r["method"]
                 for r in sub]
        fig.add_bar(name=variant, x=names, y=[r["median_ns"] for r in sub],
                    error_y=dict(type="data", symmetric=False,
                                 array=[r["p80_ns"] - r["median_ns"] for r in sub],
                                 arrayminus=[r["median_ns"] - r["p20_ns"] for r in sub]),
                    hovertemplate="%{x}: %{y:.0f} ns<extra>" + variant + "</extra>")
    fig.update_layout(barmode="group", title=f"Placeholder methods, host time per call ({_sources(rows)})",
                      yaxis=dict(type="log", title="ns per call (median, p20-p80)"), legend_title="variant")
    return fig


def plot_decode_step(rows: list[dict]) -> go.Figure:
    """Bars: encoder-scheduling host time of one decode step per combo (ms, log scale), per machine."""
    fig = go.Figure()
    for machine in _machines(rows):
        sub = [r for r in rows if r.get("machine", "this machine") == machine]
        fig.add_bar(name=machine, x=[_label(r["combo"]) for r in sub], y=[r["median_ns"] / 1e6 for r in sub],
                    text=[f"{r['speedup_vs_pr']:.1f}x vs #40143" if r.get("speedup_vs_pr") else "" for r in sub],
                    textposition="outside")
    shape = rows[0] if rows else {}
    fig.update_layout(
        barmode="group", legend_title="machine",
        title=(f"One decode step's encoder scheduling, {shape.get('num_requests', '?')} requests x "
               f"{shape.get('images_per_request', '?')} images ({_sources(rows)})"),
        yaxis=dict(type="log", title="host ms per step (median)"))
    return fig


def plot_sweep(rows: list[dict], sweep: str = "images") -> go.Figure:
    """Lines: decode-step host time vs requests or images per request (log-log), one line per combo."""
    if sweep not in ("images", "requests"):
        raise ValueError("sweep must be 'images' or 'requests'")
    x_key = "images_per_request" if sweep == "images" else "num_requests"
    fig = go.Figure()
    multi = len(_machines(rows)) > 1
    for machine in _machines(rows):
        for combo in dict.fromkeys(r["combo"] for r in rows):
            sub = sorted((r for r in rows if r.get("sweep") == sweep and r["combo"] == combo
                          and r.get("machine", "this machine") == machine), key=lambda r: r[x_key])
            if not sub:
                continue
            fig.add_scatter(x=[r[x_key] for r in sub], y=[r["median_ns"] / 1e6 for r in sub], mode="lines+markers",
                            name=_label(combo) + (f" [{machine}]" if multi else ""),
                            line=dict(color=_COLOURS.get(combo), dash="dot" if multi and machine != "h200" else None))
    fixed = "32 images per request" if sweep == "requests" else "128 requests"
    fig.update_layout(title=f"Decode-step encoder scheduling vs {sweep} ({fixed}; {_sources(rows)})",
                      xaxis=dict(type="log", title=x_key), yaxis=dict(type="log", title="host ms per step"))
    return fig


_VIEWS = {
    "before vs #40143": ("tensor+loop", "list+loop"),
    "#40143 vs this lab": ("list+loop", "list+cursor", "fast+cursor", "list+window"),
    "all": None,
}


def plot_before_after(rows: list[dict], sweep: str = "images") -> go.Figure:
    """:func:`plot_sweep` with buttons (inside plotly, so they survive HTML export) choosing which
    combos to compare: before vs #40143, #40143 vs this lab's strategies, or all."""
    fig = plot_sweep(rows, sweep)
    combos = [_combo_of(t.name) for t in fig.data]
    buttons = []
    for view, keep in _VIEWS.items():
        visible = [keep is None or c in keep for c in combos]
        buttons.append(dict(label=view, method="update", args=[{"visible": visible}]))
    first = [c in _VIEWS["before vs #40143"] for c in combos]
    for trace, vis in zip(fig.data, first):
        trace.visible = vis
    fig.update_layout(updatemenus=[dict(type="buttons", direction="right", buttons=buttons, x=0, y=1.15,
                                        xanchor="left", yanchor="top", active=0)],
                      margin=dict(t=110))
    return fig


def _combo_of(trace_name: str) -> str:
    base = trace_name.split(" [")[0]
    for combo, label in COMBO_LABELS.items():
        if label == base:
            return combo
    return base


def plot_bubble_model(comparison: dict, *, published: PublishedResult = PR40143,
                      host_max_ms: float = 40.0) -> go.Figure:
    """Step time vs host time per decode step under async (max) and sync (sum) scheduling, with
    the published before/after TPOTs and the TPOT predicted from the measured saving (simulated)."""
    c = comparison
    dev, nov = c["implied_device_ms"], c["non_overlap_ms"]
    xs = [host_max_ms * i / 200 for i in range(201)]
    fig = go.Figure()
    fig.add_scatter(x=xs, y=[max(h, dev) + nov for h in xs], name="async: max(host, device) + c", mode="lines")
    sync_dev = published.mean_tpot_ms_before - c["implied_host_before_ms"]  # device + c under the same host
    fig.add_scatter(x=xs, y=[h + sync_dev for h in xs], name="sync: host + device", mode="lines",
                    line=dict(dash="dash"))
    hb = c["implied_host_before_ms"]
    fig.add_scatter(x=[hb], y=[published.mean_tpot_ms_before], mode="markers+text", name="published before",
                    text=[f"{published.mean_tpot_ms_before} ms"], textposition="top left",
                    marker=dict(size=12, color="#c0392b"))
    fig.add_scatter(x=[hb - published.tpot_saving_ms], y=[published.mean_tpot_ms_after], mode="markers+text",
                    name="published after", text=[f"{published.mean_tpot_ms_after} ms"], textposition="bottom right",
                    marker=dict(size=12, color="#27ae60"))
    fig.add_scatter(x=[c["implied_host_after_ms"]], y=[c["predicted_tpot_after_async_ms"]], mode="markers+text",
                    name=f"predicted after (saving {c['host_saving_ms']:.2f} ms)",
                    text=[f"{c['predicted_tpot_after_async_ms']:.2f} ms"], textposition="top right",
                    marker=dict(size=12, symbol="x", color="#2980b9"))
    fig.update_layout(title=("Bubble model vs the published #40143 table (simulated: model fed with "
                             f"a measured host saving; error {c['error_async_pct']:+.1f}%)"),
                      xaxis_title="host ms per decode step", yaxis_title="step time = TPOT (ms)")
    return fig


def plot_step_timeline(host_ms: float, device_ms: float, *, steps: int = 4, non_overlap_ms: float = 0.5) -> go.Figure:
    """Host and GPU lanes over a few decode steps, sync vs async (simulated): GPU gaps are the bubbles."""
    fig = go.Figure()
    lanes = []
    for mode in ("sync", "async"):
        t = 0.0
        host, gpu = [], []
        if mode == "sync":
            for _ in range(steps):
                host.append((t, host_ms))
                gpu.append((t + host_ms, device_ms))
                t += host_ms + device_ms + non_overlap_ms
        else:
            gpu_free = 0.0
            host.append((0.0, host_ms))
            for i in range(steps):
                start = max(host[i][0] + host[i][1], gpu_free) + non_overlap_ms
                gpu.append((start, device_ms))
                gpu_free = start + device_ms
                if i + 1 < steps:  # plan the next step while this one runs
                    host.append((host[i][0] + host[i][1], host_ms))
        lanes += [(f"{mode} host", host, "#e67e22"), (f"{mode} GPU", gpu, "#2980b9")]
    for name, spans, colour in lanes:
        fig.add_bar(y=[name] * len(spans), x=[d for _, d in spans], base=[s for s, _ in spans], orientation="h",
                    marker_color=colour, name=name, showlegend=False,
                    hovertemplate="%{base:.1f} + %{x:.1f} ms<extra>" + name + "</extra>")
    fig.update_layout(barmode="overlay", title=(f"Simulated timeline: host {host_ms:.1f} ms, GPU {device_ms:.1f} ms "
                                                "per step (gaps in a GPU lane are bubbles)"),
                      xaxis_title="ms", yaxis=dict(autorange="reversed"))
    return fig


def plot_workload(rows: list[dict]) -> go.Figure:
    """Bars: median host time of one decode step and one prefill step of the whole scheduler, per combo."""
    fig = go.Figure()
    for key, name in (("decode_step_median_ns", "decode step"), ("prefill_step_median_ns", "prefill step")):
        fig.add_bar(name=name, x=[_label(r["combo"]) for r in rows],
                    y=[(r[key] or 0) / 1e3 for r in rows])
    wl = rows[0].get("workload", "?") if rows else "?"
    same = all(r.get("identical_decisions") for r in rows)
    fig.update_layout(barmode="group", yaxis=dict(type="log", title="host us per step (median)"),
                      title=(f"Whole step scheduler over workload {wl!r} ({_sources(rows)}; "
                             f"identical decisions: {'yes' if same else 'NO'})"))
    return fig
