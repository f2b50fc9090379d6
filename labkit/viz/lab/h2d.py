"""Prefix-range H2D figures: before/after #38794, the sweep, and GPU idle time (any number of machines)."""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.results import BenchResult
from labkit.viz.labels import legend_below, no_result

STRATEGY_LABELS = {
    "per_layer": "per layer (before #38794)",
    "per_step": "per step (#38794)",
    "pinned": "pinned (#41434)",
    "cached": "cached (lab)",
}
STRATEGY_ORDER = list(STRATEGY_LABELS)
COLOURS = {"per_layer": "#c0392b", "per_step": "#2471a3", "pinned": "#17a589", "cached": "#8e44ad"}


def _label(r: BenchResult) -> str:
    return f"{r.slug} ({r.source})"


def _source_note(results: list[BenchResult]) -> str:
    notes = (("measured-cpu", "CPU: copies counted as the H2D copies a GPU would make"),
             ("measured-gpu", "GPU: real H2D copies"))
    return "; ".join(note for source, note in notes if any(r.source == source for r in results))


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: STRATEGY_ORDER.index(r["variant"]) if r["variant"] in STRATEGY_ORDER else 99)


def _menu(buttons: list[dict], x: float) -> dict:
    return dict(buttons=buttons, direction="down", x=x, xanchor="left", y=1.0, yanchor="bottom",
                showactive=True, active=0, pad=dict(r=4, t=4))


def plot_before_after(results: list[BenchResult]) -> go.Figure:
    """Host time (ms) or H2D copies per decode step for each strategy, per machine (``h2d_step`` results)."""
    title = "Prefix-range tensor per decode step: before vs after #38794"
    results = [r for r in results if r.rows]
    if not results:
        return no_result("no h2d_step result recorded yet: run `labkit bench h2d --size full`", title)
    metrics = [("host time per step (ms)", lambda r: r["median_ns"] / 1e6, "log"),
               ("H2D copies per step", lambda r: r["h2d_per_step"], "log"),
               ("synchronizing copies per step", lambda r: r["sync_per_step"], "log")]
    layer_values = sorted({row["layers"] for r in results for row in r.rows})
    fig = go.Figure()
    trace_layers = []
    ys: list[list[list[float]]] = [[] for _ in metrics]
    texts: list[list[list[str]]] = [[] for _ in metrics]
    for r in results:
        for L in layer_values:
            rows = _sorted([row for row in r.rows if row["layers"] == L])
            if not rows:
                continue
            model = rows[0].get("model") or f"{L} layers"
            for k, (_, fn, _) in enumerate(metrics):
                ys[k].append([fn(row) for row in rows])
                texts[k].append([f"{v:.3g}" for v in ys[k][-1]])
            fig.add_bar(
                x=[STRATEGY_LABELS.get(row["variant"], row["variant"]) for row in rows], y=ys[0][-1],
                text=texts[0][-1], textposition="outside",
                name=f"{_label(r)}, {model}", visible=(L == layer_values[0]),
                marker_color=[COLOURS.get(row["variant"], "#7f8c8d") for row in rows] if len(results) == 1 else None,
                customdata=[[row["h2d_per_step"], row["num_seqs"], row["images_per_seq"]] for row in rows],
                hovertemplate="%{x}<br>%{y:.4g}<br>copies/step %{customdata[0]}<br>"
                              "%{customdata[1]} seqs x %{customdata[2]} images<extra>%{fullData.name}</extra>",
            )
            trace_layers.append(L)
    layer_buttons = [dict(label=f"{L} layers", method="restyle",
                          args=[{"visible": [tl == L for tl in trace_layers]}]) for L in layer_values]
    metric_buttons = [dict(label=name, method="update",
                           args=[{"y": ys[k], "text": texts[k]}, {"yaxis.title.text": name, "yaxis.type": scale}])
                      for k, (name, _, scale) in enumerate(metrics)]
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>{_source_note(results)}</sup>"),
        yaxis=dict(title=metrics[0][0], type="log"),
        barmode="group", height=460, margin=dict(t=150),
        updatemenus=[_menu(layer_buttons, 0.0), {**_menu(metric_buttons, 0.25), "type": "buttons",
                                                  "direction": "right"}],
    )
    return fig


def plot_sweep(results: list[BenchResult]) -> go.Figure:
    """Host time per step (ms, log-log) against batch size for each strategy (``h2d_sweep`` results)."""
    title = "Host time per decode step vs sequences in the batch"
    results = [r for r in results if r.rows]
    if not results:
        return no_result("no h2d_sweep result recorded yet: run `labkit bench h2d --size full`", title)
    layer_values = sorted({row["layers"] for r in results for row in r.rows})
    fig = go.Figure()
    trace_layers = []
    for r in results:
        for L in layer_values:
            for v in STRATEGY_ORDER:
                rows = sorted((row for row in r.rows if row["layers"] == L and row["variant"] == v),
                              key=lambda row: row["num_seqs"])
                if not rows:
                    continue
                fig.add_scatter(
                    x=[row["num_seqs"] for row in rows], y=[row["median_ns"] / 1e6 for row in rows],
                    mode="lines+markers", name=f"{STRATEGY_LABELS[v]}, {_label(r)}",
                    line=dict(color=COLOURS[v], dash="solid" if r.source == "measured-gpu" else "dot"),
                    visible=(L == layer_values[0]),
                    error_y=dict(type="data", symmetric=False,
                                 array=[(row["p80_ns"] - row["median_ns"]) / 1e6 for row in rows],
                                 arrayminus=[(row["median_ns"] - row["p20_ns"]) / 1e6 for row in rows]),
                )
                trace_layers.append(L)
    buttons = [dict(label=f"{L} layers", method="restyle", args=[{"visible": [tl == L for tl in trace_layers]}])
               for L in layer_values]
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>{_source_note(results)}</sup>"),
        xaxis=dict(title="sequences in the batch", type="log"),
        yaxis=dict(title="host time per step (ms)", type="log"),
        height=460, margin=dict(t=150), updatemenus=[_menu(buttons, 0.0)],
    )
    return fig


def plot_gpu_idle(results: list[BenchResult]) -> go.Figure:
    """Device idle time and step time per decode step (µs) per strategy (``h2d_gpu_idle``, GPU only)."""
    title = "GPU idle time per decode step (profiler trace)"
    results = [r for r in results if r.rows]
    if not results:
        return no_result("no GPU result recorded yet (h2d_gpu_idle): run `labkit bench h2d --size full` on a CUDA GPU", title)
    layer_values = sorted({row["layers"] for r in results for row in r.rows})
    fig = go.Figure()
    trace_layers = []
    for r in results:
        for L in layer_values:
            rows = _sorted([row for row in r.rows if row["layers"] == L])
            if not rows:
                continue
            x = [STRATEGY_LABELS.get(row["variant"], row["variant"]) for row in rows]
            fig.add_bar(x=x, y=[row["idle_us_per_step"] for row in rows], name=f"GPU idle, profiled step, {_label(r)}",
                        visible=(L == layer_values[0]), marker_color="#c0392b")
            fig.add_bar(x=x, y=[row["idle_us_per_step"] + row["busy_us_per_step"] for row in rows],
                        name=f"profiled step (busy + idle), {_label(r)}", visible=(L == layer_values[0]),
                        marker_color="#a9b4bf")
            fig.add_bar(x=x, y=[row["step_median_ns"] / 1e3 for row in rows], name=f"step, unprofiled median, {_label(r)}",
                        visible=(L == layer_values[0]), marker_color="#5d6d7e")
            trace_layers += [L, L, L]
    buttons = [dict(label=f"{L} layers", method="restyle", args=[{"visible": [tl == L for tl in trace_layers]}])
               for L in layer_values]
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>{_source_note(results)}; idle and the profiled step from the same profiled "
                        f"steps: the profiler adds time to every CUDA call,<br>so a step of thousands of synced copies "
                        f"(per_layer) lasts longer profiled than its unprofiled median</sup>"),
        yaxis=dict(title="µs per step", type="log"), barmode="group", height=480, margin=dict(t=170),
        updatemenus=[_menu(buttons, 0.0)],
    )
    return legend_below(fig)


BUILDER_COLOURS = {"pr38794": "#c0392b", "v033": "#e67e22", "cached": "#2471a3", "incremental": "#8e44ad"}


def plot_ranges_sweep(results: list[BenchResult]) -> go.Figure:
    """Host time per step (ms, log-log) to build the image ranges against images in the batch (``ranges_sweep``)."""
    title = "Building the batch's image ranges every step"
    results = [r for r in results if r.rows]
    if not results:
        return no_result("no ranges_sweep result recorded yet: run `labkit bench ranges --size full`", title)
    per_req = sorted({row["images_per_request"] for r in results for row in r.rows})
    fig = go.Figure()
    trace_imgs = []
    for r in results:
        for ipr in per_req:
            for b in BUILDER_COLOURS:
                rows = sorted((row for row in r.rows if row["variant"] == b and row["images_per_request"] == ipr),
                              key=lambda row: row["num_requests"])
                if not rows:
                    continue
                fig.add_scatter(x=[row["num_requests"] for row in rows], y=[row["median_ns"] / 1e6 for row in rows],
                                mode="lines+markers", name=f"{b}, {_label(r)}", visible=(ipr == per_req[-1]),
                                line=dict(color=BUILDER_COLOURS[b],
                                          dash="solid" if r.source == "measured-gpu" else "dot"))
                trace_imgs.append(ipr)
    buttons = [dict(label=f"{i} images/request", method="restyle",
                    args=[{"visible": [t == i for t in trace_imgs]}]) for i in per_req]
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>host time only; {', '.join(sorted({r.source for r in results}))}</sup>"),
        xaxis=dict(title="requests in the batch", type="log"),
        yaxis=dict(title="host time per step (ms)", type="log"),
        height=460, margin=dict(t=150), updatemenus=[{**_menu(buttons, 0.0), "active": len(per_req) - 1}],
    )
    return fig
