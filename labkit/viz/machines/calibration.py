"""Calibration figures: the per-machine unit costs from result ``calibration`` (a dropdown picks the machine)."""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.results import BenchResult
from labkit.viz.labels import no_result

#: what each CPU calibration row reads, as a reader writes it
CPU_LABELS = {
    "loop_only": "loop only",
    "list_index": "list[i]",
    "tensor_index_int": "int(tensor[i])",
    "tensor_index_item": "tensor[i].item()",
}


def _machine_label(r: BenchResult) -> str:
    return f"{r.slug} ({r.source})"


def _visibility_menu(labels: list[str], groups: list[list[int]], n_traces: int) -> list[dict]:
    """A dropdown: "all" plus one entry per group of trace indices."""
    buttons = [dict(label="all machines", method="update", args=[{"visible": [True] * n_traces}])]
    buttons += [dict(label=label, method="update", args=[{"visible": [i in idx for i in range(n_traces)]}])
                for label, idx in zip(labels, groups)]
    return [dict(buttons=buttons, direction="down", x=1.0, xanchor="right", y=1.15, yanchor="top")]


def plot_cpu_calibration(results: list[BenchResult]) -> go.Figure:
    """Per-element host time (ns, log scale) of list vs tensor element reads, per machine."""
    title = "Reading one element: Python list vs torch tensor (per element, host time)"
    fig = go.Figure()
    labels, groups = [], []
    for r in results:
        rows = [row for row in r.rows if row.get("kind") == "cpu" and row.get("metric") == "host_ns"]
        if not rows:
            continue
        x = [CPU_LABELS.get(row["variant"], row["variant"]) for row in rows]
        y = [row["median_ns"] for row in rows]
        fig.add_bar(
            x=x, y=y, name=_machine_label(r),
            error_y=dict(
                type="data", symmetric=False,
                array=[row["p80_ns"] - row["median_ns"] for row in rows],
                arrayminus=[row["median_ns"] - row["p20_ns"] for row in rows],
            ),
            hovertemplate="%{x}: %{y:.1f} ns<extra>%{fullData.name}</extra>",
        )
        labels.append(_machine_label(r))
        groups.append([len(fig.data) - 1])
    if not fig.data:
        return no_result("no calibration recorded yet: run `labkit calibrate --size full`", title)
    fig.update_layout(
        title=title, barmode="group", yaxis_type="log", yaxis_title="ns per element (median, p20-p80)",
        updatemenus=_visibility_menu(labels, groups, len(fig.data)), legend_title="machine",
    )
    return fig


def plot_gpu_calibration(results: list[BenchResult]) -> go.Figure:
    """H2D copy (pageable vs pinned) and launch costs in us: host time, CUDA-event span, profiler device time."""
    title = "GPU unit costs: host-to-device copies and kernel launches (median)"
    fig = go.Figure()
    labels, groups = [], []
    for r in results:
        rows = [row for row in r.rows if row.get("kind") == "gpu"]
        if not rows:
            continue
        idx = []
        # results recorded before the event-span/device split called the CUDA-event span device_ns
        legacy = not any(row["metric"] == "event_span_ns" for row in rows)
        names = {"host_ns": "host", "event_span_ns": "event span (incl. host blocking)",
                 "device_ns": "event span (incl. host blocking)" if legacy else "device (profiler)"}
        for variant in sorted({row["variant"] for row in rows}):
            for metric in ("host_ns", "event_span_ns", "device_ns"):
                sel = [row for row in rows if row["variant"] == variant and row["metric"] == metric]
                if not sel:
                    continue
                x = [f"{row['size_bytes']} B copy" if row.get("size_bytes") else "launch" for row in sel]
                fig.add_bar(
                    x=x, y=[row["median_ns"] / 1e3 for row in sel],
                    name=f"{r.slug}: {variant} {names[metric]}",
                    hovertemplate="%{x}: %{y:.2f} us<extra>%{fullData.name}</extra>",
                )
                idx.append(len(fig.data) - 1)
        labels.append(_machine_label(r))
        groups.append(idx)
    if not fig.data:
        return no_result("no GPU calibration recorded yet: run `labkit calibrate --size full` on a GPU machine", title)
    fig.update_layout(
        title=title, barmode="group", yaxis_type="log", yaxis_title="us per copy / launch",
        updatemenus=_visibility_menu(labels, groups, len(fig.data)),
    )
    return fig
