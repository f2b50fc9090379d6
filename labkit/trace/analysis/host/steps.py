"""Steps of a trace found without being told: ``ProfilerStep#N``, else vLLM's own step markers.

PyTorch's profiler schedule writes ``ProfilerStep#N`` spans. vLLM's traces (``vllm serve``
with the torch profiler) have none; the worker wraps each engine step in a
``execute_context_<n>(<tokens>)_generation_<m>(<tokens>)`` annotation, and with Python
stacks recorded the model runner's ``execute_model`` frame marks a step too (model runner
v1: ``vllm/v1/worker/gpu_model_runner.py``; v2: ``vllm/v1/worker/gpu/model_runner.py``).
``detect_steps`` tries these in that order (or takes an explicit regex) and says which it
used; a trace with none gets a note instead of steps.

Steps are the top-level matching spans: a span that starts inside the previous kept step is
nested or a duplicate (the profiler writes ``ProfilerStep#N`` as both an annotation and a CPU
op) and is dropped, so repeated names (vLLM's step label repeats) are all kept.

``step_phases`` splits each step's host time by annotated phase: every other annotation inside
the step in the step's process, and the model runner's phase frames (``_prepare_inputs``,
``_model_forward``, ``_sample``...). Phases may nest, so they need not add up to the step.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from labkit.errors import UsageError
from labkit.trace.read.columns import cat_mask, group_codes
from labkit.trace.read.load import Trace

PROFILER_STEP = r"^ProfilerStep\s*#\s*\d+"
VLLM_CONTEXT = r"^execute_context"
VLLM_EXECUTE_MODEL = r"(^|: |\.)execute_model$"
#: (source, regex, categories searched), tried in order when no pattern is given
AUTO_PATTERNS = (
    ("ProfilerStep", PROFILER_STEP, ("user_annotation", "cpu_op")),
    ("vllm execute_context", VLLM_CONTEXT, ("user_annotation", "cpu_op")),
    ("vllm execute_model", VLLM_EXECUTE_MODEL, ("user_annotation", "cpu_op", "python_function")),
)
RUNNERS = (("v2", "vllm/v1/worker/gpu/model_runner.py"), ("v1", "vllm/v1/worker/gpu_model_runner.py"))
#: model-runner functions whose frames are reported as step phases
PHASE_FUNCTIONS = ("_update_states", "_prepare_inputs", "_preprocess", "_execute_mm_encoder", "_gather_mm_embeddings",
                   "_build_attention_metadata", "prepare_inputs", "_model_forward", "_sample", "sample_tokens",
                   "_bookkeeping_sync", "propose_draft_token_ids", "postprocess")
_PHASE = re.compile(r"vllm/.*\(\d+\): (" + "|".join(PHASE_FUNCTIONS) + r")$")
STEP_COLUMNS = ["step", "name", "start_us", "end_us", "dur_us", "pid", "tid"]
NO_STEPS_NOTE = ("no step markers in this trace (no ProfilerStep#N, execute_context_* or execute_model spans): "
                 "per-step figures are empty; --steps REGEX names another span")


def _compile(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"bad step pattern {pattern!r}: {exc}") from None


def _matching(trace: Trace, rx: re.Pattern, cats) -> pd.DataFrame:
    ev = trace.events
    names = ev["name"]
    cands = names.cat.categories if hasattr(names, "cat") else pd.unique(names.astype(str))
    wanted = [n for n in cands if rx.search(str(n))]
    return ev[cat_mask(ev["cat"], cats) & cat_mask(names, wanted)]


def top_level_spans(spans: pd.DataFrame) -> pd.DataFrame:
    """Spans (``ts_us``, ``dur_us``...) sorted by start, without those starting inside a kept one."""
    s = spans.sort_values(["ts_us", "dur_us"], ascending=[True, False], kind="stable")
    ts, end = s["ts_us"].to_numpy(), (s["ts_us"] + s["dur_us"]).to_numpy()
    keep = np.zeros(len(s), bool)
    last_end = -np.inf
    for i in range(len(s)):
        if ts[i] >= last_end:
            keep[i] = True
            last_end = end[i]
    return s[keep]


def _runner(trace: Trace) -> str | None:
    ev = trace.events
    names = ev["name"]
    cands = names.cat.categories if hasattr(names, "cat") else pd.unique(names.astype(str))
    text = [str(c) for c in cands if "model_runner.py" in str(c)]
    for label, path in RUNNERS:
        if any(path in t for t in text):
            return label
    return None


def detect_steps(trace: Trace, pattern: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Steps of ``trace`` (``STEP_COLUMNS``, us) and how they were found.

    ``pattern``: a regex over user annotations and CPU ops (None: automatic, see the module
    docstring). The info dict has ``source`` (which marker, or ``"pattern"``/None),
    ``pattern``, ``model_runner`` (``"v1"``/``"v2"`` where vLLM frames say so) and ``note``."""
    tries = (("pattern", pattern, ("user_annotation", "cpu_op")),) if pattern is not None else AUTO_PATTERNS
    found, source, used = None, None, pattern
    for src, pat, cats in tries:
        m = _matching(trace, _compile(pat), cats)
        if len(m):
            found, source, used = m, src, pat
            break
    info = {"source": source, "pattern": used, "model_runner": _runner(trace), "note": None}
    if found is None:
        info["note"] = NO_STEPS_NOTE if pattern is None else f"no span matches the step pattern {pattern!r}"
        return pd.DataFrame({c: [] for c in STEP_COLUMNS}), info
    s = top_level_spans(found)
    out = pd.DataFrame({
        "step": np.arange(len(s)), "name": s["name"].astype(str).to_numpy(), "start_us": s["ts_us"].to_numpy(),
        "end_us": (s["ts_us"] + s["dur_us"]).to_numpy(), "dur_us": s["dur_us"].to_numpy(),
        "pid": s["pid"].to_numpy(), "tid": s["tid"].to_numpy(),
    })
    return out, info


def step_phases(trace: Trace, steps: pd.DataFrame) -> pd.DataFrame:
    """Host time per annotated phase per step: ``step``, ``phase``, ``count``, ``host_us`` (clipped to the step).

    Phases: annotations inside the step (other than the step's own span) and the
    model runner's phase frames (``PHASE_FUNCTIONS``, labelled by function name), in the step's
    process (Python frames are often recorded under another thread id than the annotation)."""
    cols = ["step", "phase", "count", "host_us"]
    if len(steps) == 0:
        return pd.DataFrame({c: [] for c in cols})
    ev = trace.events
    names = ev["name"]
    cands = names.cat.categories if hasattr(names, "cat") else pd.unique(names.astype(str))
    frames = {str(c): m.group(1) for c in cands if (m := _PHASE.search(str(c)))}
    is_ann = (ev["cat"] == "user_annotation").to_numpy()
    is_frame = (ev["cat"] == "python_function").to_numpy() & cat_mask(names, frames)
    cand = ev[is_ann | is_frame]
    label = np.where(cand["cat"].to_numpy() == "python_function",
                     cand["name"].astype(str).map(frames).to_numpy(), cand["name"].astype(str).to_numpy())
    ts, end = cand["ts_us"].to_numpy(), (cand["ts_us"] + cand["dur_us"]).to_numpy()
    pid = cand["pid"].to_numpy()
    step_of, phase, host_us = [], [], []
    for st in steps.itertuples():
        inside = (pid == st.pid) & (ts >= st.start_us) & (ts < st.end_us)
        inside &= ~((ts == st.start_us) & (label == st.name))  # the step's own span
        if not inside.any():
            continue
        step_of += [int(st.step)] * int(inside.sum())
        phase += label[inside].tolist()
        host_us.append(np.minimum(end[inside], st.end_us) - ts[inside])
    if not host_us:
        return pd.DataFrame([], columns=cols)
    code, keys = group_codes(step_of, phase)  # per step, phases in order of first appearance
    sums = pd.Series(np.concatenate(host_us)).groupby(code, sort=False).sum().to_numpy()
    counts = np.bincount(code, minlength=len(keys))
    return pd.DataFrame([(s, p, int(c), float(x)) for (s, p), c, x in zip(keys, counts, sums)], columns=cols)
