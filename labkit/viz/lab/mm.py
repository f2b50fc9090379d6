"""Figures for the scheduler half (#40143): placeholder calls, decode steps, sweeps, the whole scheduler."""

from __future__ import annotations

import plotly.graph_objects as go


__all__ = ["COMBO_LABELS", "plot_placeholder_calls", "plot_decode_step", "plot_sweep", "plot_before_after",
           "plot_workload"]

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
    buttons = [dict(label=view, method="update", args=[{"visible": [keep is None or c in keep for c in combos]}])
               for view, keep in _VIEWS.items()]
    first = [c in _VIEWS["before vs #40143"] for c in combos]
    for trace, vis in zip(fig.data, first):
        trace.visible = vis
    fig.update_layout(updatemenus=[dict(type="buttons", direction="right", buttons=buttons, x=0, y=1.15,
                                        xanchor="left", yanchor="top", active=0)],
                      margin=dict(t=110))
    return fig


def _combo_of(trace_name: str) -> str:
    base = trace_name.split(" [")[0]
    return next((combo for combo, label in COMBO_LABELS.items() if label == base), base)


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
