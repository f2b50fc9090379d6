"""Notebook 08's answer: #40143's published table beside the step model's full-batch peaks (result ``pr_table``).

:func:`plot_crossover` draws where the baseline turns host-bound; :func:`table_frame`,
:func:`gains_frame`, :func:`peaks_frame`, :func:`device_parts_frame` and :func:`inferred_frame` are
the tables under it. Every number comes from the result. docs/serve-sim.md reads them.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from labkit.facts import GEMMA4_E4B, PR40143
from labkit.gpu.device_efficiency import load_efficiencies
from labkit.gpu.device_model import step_device_time
from labkit.serve.host import Chains, Counts
from labkit.step_model import StepShape, peak_tokens_per_s, step_time
from labkit.viz.sources import source_style
from labkit.vllm.serving import get_workload, prompt_layout

NO_PR_TABLE = "no full pr_table result recorded yet: run `labkit bench serve-sim`"
NOT_PREDICTED = "not predicted"
METRIC_LABELS = {"peak_output_tok_s": "peak output tok/s", "output_tok_s": "output tok/s",
                 "mean_tpot_ms": "mean TPOT (ms)", "mean_ttft_s": "mean TTFT (s)", "duration_s": "duration (s)"}


def table_frame(result, gpu: str | None = None) -> pd.DataFrame:
    """The table on ``gpu`` (default: the one the result names): one row per metric, both arms'
    predicted and published figures and errors, which row the unknown was inferred from, and
    "not predicted" for the whole-run figures (``params.whole_run`` says why)."""
    gpu = gpu or result.params["gpu"]
    out = []
    for metric, label in METRIC_LABELS.items():
        row = {"figure": label}
        for arm in result.params["arms"]:
            r = next((x for x in result.rows if (x["arm"], x["gpu"], x["metric"]) == (arm, gpu, metric)), None)
            if r is None:
                continue
            whole = metric.endswith("tok_s")  # token rates printed whole, as vllm bench serve prints them
            got = r["predicted"]
            row[f"{arm} predicted"] = NOT_PREDICTED if got is None else round(got) if whole else got
            if r["published"] is not None:
                row[f"{arm} published"] = round(r["published"]) if whole else r["published"]
                row[f"{arm} error"] = ("inferred from it" if r.get("inferred") else "" if r["error"] is None
                                       else f"{r['error']:+.1%}")
        out.append(row)
    return pd.DataFrame(out, dtype=object)  # token rates stay whole numbers beside the float rows


def gains_frame(result, gpu: str | None = None) -> pd.DataFrame:
    """After over before (a time: before over after) on ``gpu`` (default: the one the result names),
    predicted beside published, as the result's gain rows hold them (two decimals, as the answer
    states them)."""
    gpu = gpu or result.params["gpu"]
    rows = [{"gain": r["metric"].removeprefix("gain_"),
             "predicted": NOT_PREDICTED if r["predicted"] is None else f"{r['predicted']:.2f}",
             "published": f"{r['published']:.2f}", "error": "" if r["error"] is None else f"{r['error']:+.1%}"}
            for r in result.rows if r["metric"].startswith("gain_") and r["gpu"] == gpu]
    return pd.DataFrame(rows)


def peaks_frame(result) -> pd.DataFrame:
    """The steady full-batch step per GPU, arm and regime: device, host, step, which side sets it, peak
    (whole tokens/s, as ``vllm bench serve`` prints them)."""
    cols = ["gpu", "arm", "regime", "device_ms", "host_ms", "step_ms", "bound", "peak_output_tok_s"]
    frame = pd.DataFrame(result.params["peaks"])[cols]
    return frame.assign(peak_output_tok_s=[round(v) for v in frame["peak_output_tok_s"]]).astype(object)


def inferred_frame(result) -> pd.DataFrame:
    """The unknown of the PR's machine: the value inferred, the figure it came from, and what the lab
    measures itself (per machine, the range over its recorded measurements)."""
    read = result.params["inferred"]["read_ns"]

    def span(v) -> str:
        lo, hi = v["min"] / 1e3, v["max"] / 1e3
        return f"{lo:.2f}" if hi == lo else f"{lo:.2f}-{hi:.2f}"

    measured = "; ".join(f"{m} {span(v)}" for m, v in read["lab_measured_ns"].items())
    return pd.DataFrame([
        {"unknown": "tensor read + int() on the PR host (us)", "inferred": read["value"] / 1e3,
         "from": f"the baseline's peak output tok/s (published {PR40143.before.peak_output_tok_s:,.0f})",
         "the lab measures": f"{measured} us"}])


def device_parts_frame(gpu: str = "h200", requests: int = 128) -> pd.DataFrame:
    """The roofline's full-batch decode step at #40143's shape on ``gpu``, part by part: its time,
    which bound sets it, and the efficiency it ran at with where that comes from (measured on
    the lab's H200, or carried over from a measured one)."""
    prompt, _ = prompt_layout(get_workload("full"))
    step = step_device_time(GEMMA4_E4B, gpu, StepShape((prompt,) * requests))
    def where(r) -> str:  # measured: on which recording; assumed: the measured one it carries over
        if r["assumed"]:
            return "carried over: " + r["origin"].split("'s value")[0].removeprefix("assumed: ").replace("_", " ")
        return "measured on the H200: " + ("the engine's profile" if "profiles" in r["origin"] else
                                           "the attention benchmark")

    origin = {r["name"]: where(r) for r in load_efficiencies(gpu).rows()}
    rows = []
    for p in step.parts:
        if p.time_ns <= 0:
            continue
        eff = p.stream_efficiency if p.bound == "memory" else p.compute_efficiency
        value = p.stream_value if p.bound == "memory" else p.compute_value
        rows.append({"part": p.name, "time_ms": p.time_ns / 1e6, "bound": p.bound,
                     "efficiency": f"{eff} {value:.2f}", "from": origin[eff]})
    return pd.DataFrame(rows)


def plot_crossover(result, gpu: str | None = None) -> go.Figure:
    """The full-batch step's output tok/s against the PR host's cost per tensor read, each arm
    ``max(device, host) + non_overlap`` on ``gpu``: the baseline's host grows with the read cost and
    crosses the device where its line bends; the lab's machines' measured costs and the inferred one marked."""
    p = result.params
    gpu = gpu or p["gpu"]
    requests, loop_ns = p["workload"]["requests"], p["units"]["loop_ns"]
    chains = Chains(p["workload"]["images_per_request"], {a: [(n, Counts(**c)) for n, c in pts]
                                                          for a, pts in p["chains"].items()})
    device = next(q["device_ms"] for q in p["peaks"] if q["gpu"] == gpu) * 1e6
    read = p["inferred"]["read_ns"]
    marks = {f"{m} (measured)": v["max"] for m, v in read["lab_measured_ns"].items()}
    top = 1.5 * max([read["value"], *marks.values()])
    xs = [top * k / 120 for k in range(121)]
    fig = go.Figure()
    colour, pattern = source_style("simulated")
    for arm, dash in (("baseline", "solid"), ("pr40143", "dot")):
        c = chains.counts(arm, requests)
        ys = [peak_tokens_per_s(step_time(device, c.reads * x + c.loops * loop_ns, p["regime"],
                                          p.get("non_overlap_ns", 0.0)).step_ns, requests) for x in xs]
        fig.add_scatter(x=[x / 1e3 for x in xs], y=ys, mode="lines", name=f"{arm}: max(device, host), simulated",
                        line=dict(color=colour, dash=dash), hovertemplate=f"{arm}: %{{y:,.0f}} tok/s at %{{x:.2f}} us"
                                                                          "<extra></extra>")
    for label, x in marks.items():
        fig.add_vline(x=x / 1e3, line=dict(color="#444", width=1), annotation_text=label, annotation_textangle=-90,
                      annotation_position="top left")
    fig.add_vline(x=read["value"] / 1e3, line=dict(color=colour, width=2, dash="dash"), opacity=0.45,
                  annotation_text="PR host (inferred)", annotation_textangle=-90, annotation_position="top right")
    for arm, dash in (("baseline", "solid"), ("pr40143", "dot")):
        fig.add_hline(y=PR40143.side(arm).peak_output_tok_s, line=dict(color="#444", width=1, dash=dash),
                      annotation_text=f"{arm} published peak", annotation_position="bottom right")
    fig.update_layout(height=290, margin=dict(t=60, b=50, l=60, r=10), legend=dict(orientation="h", y=-0.2),
                      title=f"Where the baseline turns host-bound: {requests} requests decoding on an {gpu.upper()}",
                      xaxis_title="host cost of one tensor read + int() (us)", yaxis_title="full-batch output tok/s")
    return fig
