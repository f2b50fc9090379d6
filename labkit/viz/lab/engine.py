"""Engine figures: throughput / idle / step time per variant, and timelines per CUDA-graph mode."""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.viz.labels import add_full_names, legend_below, shorten

#: metric key -> (axis label, scale applied to the row value)
METRICS = {
    "tokens_per_s_median": ("output tokens/s (tokens per step / median step)", 1.0),
    "tokens_per_s_window": ("output tokens/s over the measured window", 1.0),
    "device_idle_frac": ("device idle fraction", 1.0),
    "median_ns": ("median step time (ms)", 1e-6),
    "host_schedule_ns": ("host schedule time per step (ms)", 1e-6),
}


#: longest profile description left whole in a title (the rest goes to a hover caption)
PROFILE_CHARS = 40


def _source_note(rows) -> str:
    sources = sorted({str(r.get("source")) for r in rows})
    note = ", ".join(sources)
    if "simulated" in sources:
        profiles = sorted({str(r.get("profile_origin") or r.get("profile") or "?") for r in rows})
        note += f" (profile: {shorten('; '.join(profiles), PROFILE_CHARS)})"
    return note


def plot_engine_bars(rows: list[dict], *, title: str = "Engine per variant", metric: str = "tokens_per_s_median"
                     ) -> go.Figure:
    """Bars per variant; buttons switch between ``METRICS``. ``rows`` are ``labkit bench engine`` rows.

    Rows recorded before the median-based throughput existed get it derived from their own fields
    (``labkit.engine.recorded.with_robust_metrics``); the default metric is robust to one-off stalls.
    """
    from labkit.engine.recorded import with_robust_metrics

    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}: one of {', '.join(METRICS)}")
    rows = with_robust_metrics(rows)
    labels = [r["variant"] for r in rows]
    fig = go.Figure()
    keys = list(METRICS)
    for key in keys:
        label, scale = METRICS[key]
        vals = [None if r.get(key) is None else r[key] * scale for r in rows]
        fig.add_trace(go.Bar(x=labels, y=vals, name=label, visible=(key == metric),
                             text=[None if v is None else f"{v:.3g}" for v in vals], textposition="outside"))
    buttons = [dict(label=METRICS[key][0], method="update", args=[{"visible": [j == i for j in range(len(keys))]},
                                                                   {"yaxis": {"title": {"text": METRICS[key][0]}}}])
               for i, key in enumerate(keys)]
    fig.update_layout(
        title=f"{title} - {_source_note(rows)}",
        updatemenus=[dict(type="buttons", direction="right", buttons=buttons, x=0, y=1.15, xanchor="left")],
        yaxis_title=METRICS[metric][0], xaxis_tickangle=-30, margin=dict(t=110), showlegend=False,
    )
    add_full_names(fig, {"; ".join(sorted({str(r.get("profile_origin") or r.get("profile") or "?") for r in rows}))},
                   PROFILE_CHARS, label="profile")
    return fig


def plot_sim_vs_measured(table, *, title: str = "Simulated vs measured step time") -> go.Figure:
    """Grouped bars of measured and simulated median step time (ms) per variant.

    ``table`` is ``labkit.engine.recorded.sim_vs_measured``'s DataFrame; the ratio is printed on
    the simulated bars. The simulated bars are labelled as such.
    """
    if table is None or not len(table):
        raise ValueError("no variants to compare")
    x = list(table["variant"])
    fig = go.Figure([
        go.Bar(x=x, y=list(table["measured_step_ms"]), name="measured (GPU)"),
        go.Bar(x=x, y=list(table["simulated_step_ms"]), name="simulated (GPU profile)",
               text=[f"x{v:.2f}" for v in table["step_ratio"]], textposition="outside"),
    ])
    fig.update_layout(title=f"{title} (simulated bars: simulated device)", barmode="group",
                      yaxis_title="median step time (ms)", yaxis_type="log", xaxis_tickangle=-30,
                      margin=dict(t=80), height=420)
    return fig


def plot_mode_timelines(runs: dict[str, tuple], *, labels: tuple[str, str] = ("eager", "CUDA graphs"),
                        max_events: int = 4_000, title: str = "Eager vs CUDA graphs") -> go.Figure:
    """Two timelines stacked (eager above, graphs below) per run; a dropdown picks the run.

    ``runs``: label -> ``(eager trace, graph trace)`` (paths or analyses). Every run's bars are
    precomputed into the figure and the dropdown (plotly ``updatemenus``) only switches their
    visibility, so it works in an exported page. Each panel draws at most ``max_events`` bars
    (merged at a resolution, ``labkit.viz.timeline.decimate``). Simulated traces say so in the title.
    """
    from plotly.subplots import make_subplots

    from labkit.viz.timeline import _as_trace, _bars, _cap, _lanes, max_resolution_ms

    if not runs:
        raise ValueError("no runs to show")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=False, vertical_spacing=0.2,  # room for the top's axis title
                        subplot_titles=(labels[0], labels[1]))
    spans, lanes_all, simulated = [], [set(), set()], False
    for name, pair in runs.items():
        start = len(fig.data)
        for row, trace in enumerate(pair, start=1):
            an = _as_trace(trace)
            simulated = simulated or bool(an.source().get("simulated"))
            lanes, rows = _lanes(an)
            lanes_all[row - 1].update(lanes)
            fig.add_traces(_bars(_cap(rows, max_events, max_resolution_ms(an)), showlegend=(row == 1)),  # one run shows
                           rows=row, cols=1)
        spans.append((name, start, len(fig.data)))
    n = len(fig.data)
    for i, tr in enumerate(fig.data):
        tr.visible = spans[0][1] <= i < spans[0][2]
    suffix = " - SIMULATED device timeline" if simulated else ""
    buttons = [dict(label=name, method="update",
                    args=[{"visible": [a <= i < b for i in range(n)]}, {"title": {"text": f"{title}: {name}{suffix}"}}])
               for name, a, b in spans]
    for row in (1, 2):
        lanes = sorted(lanes_all[row - 1], key=lambda s: (not s.startswith("host"), s))
        fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)), automargin=True, row=row, col=1)
        fig.update_xaxes(title_text="time since trace start (ms)", row=row, col=1)
    fig.update_layout(title=f"{title}: {spans[0][0]}{suffix}", barmode="overlay", height=560,
                      margin=dict(l=10, r=10, t=110),  # the menu at the right, clear of the title at the left
                      updatemenus=[dict(buttons=buttons, direction="down", x=1.0, y=1.22, xanchor="right")])
    return legend_below(fig)
