"""vLLM's whole engine step, phase by phase, from the Python frames of its own profiler trace.

The phases: docs/trace-analyzer.md ("vLLM's engine steps").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.trace.analysis.host.steps import top_level_spans
from labkit.trace.read.columns import name_mask
from labkit.trace.read.load import EventTables

__all__ = ["PhaseSpec", "ENGINE_PHASES", "TOP_PHASES", "SUB_PHASES", "STEP_FRAMES", "engine_steps",
           "engine_phase_table", "phase_summary"]


@dataclass(frozen=True)
class PhaseSpec:
    """A phase: the Python frames that make it (a regex over frame names) and the phase it lies inside."""

    name: str
    frames: str
    parent: str | None = None


_VLLM = r"vllm/"
#: the frames each measured phase is made of (``prepare_inputs`` and ``forward`` are derived from them)
ENGINE_PHASES = (
    PhaseSpec("schedule", _VLLM + r"v1/core/sched/scheduler\.py\(\d+\): schedule$"),
    PhaseSpec("encoder_inputs", r"\(\d+\): _try_schedule_encoder_inputs$", "schedule"),
    PhaseSpec("get_num_embeds", r"\(\d+\): get_num_embeds$", "encoder_inputs"),
    PhaseSpec("execute_model", _VLLM + r"v1/(executor/\w+|worker/\w*model_runner)\.py\(\d+\): execute_model$"),
    PhaseSpec("input_prep", _VLLM + r"v1/worker/\w*model_runner\.py\(\d+\): synchronize_input_prep$",
              "prepare_inputs"),
    PhaseSpec("update_states", _VLLM + r"v1/worker/\w*model_runner\.py\(\d+\): _update_states$", "prepare_inputs"),
    PhaseSpec("prepare_inputs_fn", _VLLM + r"v1/worker/\w*model_runner\.py\(\d+\): _prepare_inputs$",
              "prepare_inputs"),
    PhaseSpec("attention_metadata", _VLLM + r"v1/worker/\w*model_runner\.py\(\d+\): _build_attention_metadata$",
              "prepare_inputs"),
    PhaseSpec("preprocess", _VLLM + r"v1/worker/\w*model_runner\.py\(\d+\): _preprocess$", "prepare_inputs"),
    PhaseSpec("encoder", _VLLM + r"v1/worker/\w*model_runner\.py\(\d+\): _execute_mm_encoder$"),
    PhaseSpec("model_forward", _VLLM + r"v1/worker/\w*model_runner\.py\(\d+\): _model_forward$", "forward"),
    PhaseSpec("logits", _VLLM + r"model_executor/models/\w+\.py\(\d+\): compute_logits$", "forward"),
    PhaseSpec("sample", _VLLM + r"v1/(executor/\w+|worker/\w*model_runner)\.py\(\d+\): sample_tokens$"),
    PhaseSpec("sampler", _VLLM + r"v1/worker/\w*model_runner\.py\(\d+\): _sample$", "sample"),
    PhaseSpec("bookkeeping", _VLLM + r"v1/worker/\w*model_runner\.py\(\d+\): _bookkeeping_sync$", "sample"),
    PhaseSpec("update_from_output", _VLLM + r"v1/core/sched/scheduler\.py\(\d+\): update_from_output$"),
    PhaseSpec("process_outputs", _VLLM + r"v1/engine/output_processor\.py\(\d+\): process_outputs$"),
    PhaseSpec("detokenize", _VLLM + r"v1/engine/detokenizer\.py\(\d+\): update$", "process_outputs"),
)
#: the phases that partition a step (with ``other``), in the order of the step
TOP_PHASES = ("schedule", "prepare_inputs", "encoder", "forward", "sample", "update_from_output", "process_outputs")
#: the phases reported inside a top-level one: name -> parent
SUB_PHASES = {p.name: p.parent for p in ENGINE_PHASES if p.parent is not None}
#: engine step frames, tried in order: the in-process ``LLMEngine.step``, else the engine core's step
STEP_FRAMES = (("LLMEngine.step", _VLLM + r"v1/engine/llm_engine\.py\(\d+\): step$"),
               ("EngineCore.step", _VLLM + r"v1/engine/core\.py\(\d+\): (step|step_with_batch_queue)$"))
STEP_COLUMNS = ["step", "start_us", "end_us", "dur_us", "pid", "tid"]


def _frames(trace: EventTables, pattern: str) -> pd.DataFrame:
    ev = trace.events
    is_frame = trace.once("python_frames", lambda: (ev["cat"] == "python_function").to_numpy())
    return ev[is_frame & name_mask(ev["name"], re.compile(pattern))]


def engine_steps(trace: EventTables) -> tuple[pd.DataFrame, str | None]:
    """The engine's whole steps (``STEP_COLUMNS``, us; only those wholly inside the trace) and their frame."""
    for label, pattern in STEP_FRAMES:
        f = _frames(trace, pattern)
        if len(f):
            ev = trace.events
            first, last = float(ev["ts_us"].min()), float((ev["ts_us"] + ev["dur_us"]).max())
            s = top_level_spans(f)
            s = s[(s["ts_us"] > first) & (s["ts_us"] + s["dur_us"] < last)]  # not cut by the profiler
            return pd.DataFrame({"step": np.arange(len(s)), "start_us": s["ts_us"].to_numpy(),
                                 "end_us": (s["ts_us"] + s["dur_us"]).to_numpy(), "dur_us": s["dur_us"].to_numpy(),
                                 "pid": s["pid"].to_numpy(), "tid": s["tid"].to_numpy()}), label
    return pd.DataFrame({c: [] for c in STEP_COLUMNS}), None


def _union_inside(ts: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[float, int]:
    """Length of the union of intervals ``[ts, end)`` clipped to ``[lo, hi)``, and how many outermost ones."""
    a, b = np.maximum(ts, lo), np.minimum(end, hi)
    keep = b > a
    a, b = a[keep], b[keep]
    if not len(a):
        return 0.0, 0
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    total, count, cur_a, cur_b = 0.0, 0, a[0], b[0]
    for x, y in zip(a[1:], b[1:]):
        if x >= cur_b:
            total += cur_b - cur_a
            count += 1
            cur_a, cur_b = x, y
        else:
            cur_b = max(cur_b, y)
    return total + (cur_b - cur_a), count + 1


def _input_prep_span(frames: dict, st) -> float:
    """us of the runner's input preparation in step ``st``, clipped to the step (0 where its frames are missing)."""
    def inside(name):
        pid, ts, end = frames[name]
        keep = (pid == st.pid) & (ts < st.end_us) & (end > st.start_us)
        return np.maximum(ts[keep], st.start_us), np.minimum(end[keep], st.end_us)

    first, last = inside("input_prep")
    if len(first) < 2:
        (first, _), (_, last) = inside("update_states"), inside("preprocess")
    if not len(first) or not len(last):
        return 0.0
    return max(0.0, float(last.max() - first.min()))


def engine_phase_table(trace: EventTables, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per engine step: its phases (us), counts, ``other_us`` and ``named_share``."""
    if steps is None:
        steps, _ = engine_steps(trace)
    if len(steps) == 0:
        return pd.DataFrame()
    frames = {}
    for spec in ENGINE_PHASES:
        f = _frames(trace, spec.frames)
        frames[spec.name] = (f["pid"].to_numpy(), f["ts_us"].to_numpy(), (f["ts_us"] + f["dur_us"]).to_numpy())
    rows = []
    for st in steps.itertuples():
        row = {"step": int(st.step), "start_us": float(st.start_us), "dur_us": float(st.dur_us)}
        for name, (pid, ts, end) in frames.items():
            mine = pid == st.pid
            row[f"{name}_us"], row[f"{name}_count"] = _union_inside(ts[mine], end[mine], st.start_us, st.end_us)
        row["forward_us"] = row["model_forward_us"] + row["logits_us"]
        row["input_prep_us"] = _input_prep_span(frames, st)
        row["prepare_inputs_us"] = row["input_prep_us"] - row["encoder_us"]
        row["other_us"] = row["dur_us"] - sum(row[f"{p}_us"] for p in TOP_PHASES)
        row["named_share"] = 1.0 - row["other_us"] / row["dur_us"] if row["dur_us"] > 0 else None
        rows.append(row)
    return pd.DataFrame(rows)


def phase_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median per step of every phase column of :func:`engine_phase_table` (``phase``, ``parent``,
    ``median_us``, ``steps``): the top-level phases, ``other``, then the sub-phases."""
    if table is None or len(table) == 0:
        return pd.DataFrame(columns=["phase", "parent", "median_us", "steps"])
    out = [("step", None)] + [(p, None) for p in TOP_PHASES] + [("other", None)] + list(SUB_PHASES.items())
    return pd.DataFrame([{"phase": p, "parent": parent,
                          "median_us": float(table["dur_us" if p == "step" else f"{p}_us"].median()),
                          "steps": int(len(table))} for p, parent in out])
