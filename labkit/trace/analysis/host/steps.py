"""The one step finder: ``ProfilerStep#N``, else vLLM's own step markers, for analyze, whatif and the bubbles.

The rules: docs/trace-analyzer.md ("Steps").
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from labkit.errors import UsageError
from labkit.trace.read.columns import cat_mask, group_codes, name_mask
from labkit.trace.read.load import EventTables
from labkit.trace.whatif.changes import closest_names

PROFILER_STEP = r"^ProfilerStep\s*#\s*\d+"
#: HTA's own reading of the profiler's steps (exact name), and the step number in it
STEP_NUMBER = re.compile(r"^ProfilerStep#(\d+)")
VLLM_CONTEXT = r"^execute_context"
VLLM_EXECUTE_MODEL = r"(^|: |\.)execute_model$"
#: ``labkit analyze``: (source, regex, categories searched), tried in order when no pattern is given
AUTO_PATTERNS = (
    ("ProfilerStep", PROFILER_STEP, ("user_annotation", "cpu_op")),
    ("vllm execute_context", VLLM_CONTEXT, ("user_annotation", "cpu_op")),
    ("vllm execute_model", VLLM_EXECUTE_MODEL, ("user_annotation", "cpu_op", "python_function")),
)
#: ``labkit whatif``: regexes over every host span but runtime calls, tried in order (outermost per thread)
WHATIF_PATTERNS = (PROFILER_STEP, r"^execute_(model|context)")
RUNNERS = (("v2", "vllm/v1/worker/gpu/model_runner.py"), ("v1", "vllm/v1/worker/gpu_model_runner.py"))
#: model-runner functions whose frames are reported as step phases
PHASE_FUNCTIONS = ("_update_states", "_prepare_inputs", "_preprocess", "_execute_mm_encoder", "_gather_mm_embeddings",
                   "_build_attention_metadata", "prepare_inputs", "_model_forward", "_sample", "sample_tokens",
                   "_bookkeeping_sync", "propose_draft_token_ids", "postprocess")
_PHASE = re.compile(r"vllm/.*\(\d+\): (" + "|".join(PHASE_FUNCTIONS) + r")$")
STEP_COLUMNS = ["step", "name", "start_us", "end_us", "dur_us", "pid", "tid"]
NO_STEPS_NOTE = ("no step markers in this trace (no ProfilerStep#N, execute_context_* or execute_model spans): "
                 "per-step figures are empty; --steps REGEX names another span")


def compile_steps(pattern: str, message: str = "bad step pattern {!r}: {}") -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(message.format(pattern, exc)) from None


def top_level_spans(spans: pd.DataFrame) -> pd.DataFrame:
    """Spans (``ts_us``, ``dur_us``...) sorted by start (longest first), without those starting inside a kept one."""
    s = spans.sort_values(["ts_us", "dur_us"], ascending=[True, False], kind="stable")
    ts, end = s["ts_us"].to_numpy(), (s["ts_us"] + s["dur_us"]).to_numpy()
    keep = np.zeros(len(s), bool)
    last_end = -np.inf
    for i in range(len(s)):
        if ts[i] >= last_end:
            keep[i], last_end = True, end[i]
    return s[keep]


def detect_steps(trace: EventTables, pattern: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Steps of ``trace`` (``STEP_COLUMNS``, us) and how they were found (``pattern`` None: ``AUTO_PATTERNS``)."""
    ev = trace.events
    tries = (("pattern", pattern, ("user_annotation", "cpu_op")),) if pattern is not None else AUTO_PATTERNS
    found, source, used = None, None, pattern
    for src, pat, cats in tries:
        m = ev[cat_mask(ev["cat"], cats) & name_mask(ev["name"], compile_steps(pat))]
        if len(m):
            found, source, used = m, src, pat
            break
    runner = next((label for label, path in RUNNERS if any(path in c for c in ev["name"].cat.categories)), None)
    info = {"source": source, "pattern": used, "model_runner": runner, "note": None}
    if found is None:
        info["note"] = NO_STEPS_NOTE if pattern is None else f"no span matches the step pattern {pattern!r}"
        return pd.DataFrame({c: [] for c in STEP_COLUMNS}), info
    s = top_level_spans(found)
    return pd.DataFrame({
        "step": np.arange(len(s)), "name": s["name"].astype(str).to_numpy(), "start_us": s["ts_us"].to_numpy(),
        "end_us": (s["ts_us"] + s["dur_us"]).to_numpy(), "dur_us": s["dur_us"].to_numpy(),
        "pid": s["pid"].to_numpy(), "tid": s["tid"].to_numpy(),
    }), info


def find_step_spans(rec, pattern: str | None = None) -> tuple[list, str | None]:
    """The what-if's steps: ``[(thread key, Span)]`` of the outermost spans per thread matching ``pattern``
    (default: ``WHATIF_PATTERNS`` in order), sorted by start; and the pattern used (None: no steps)."""
    for pat in ([pattern] if pattern else WHATIF_PATTERNS):
        rx = compile_steps(pat, "--steps {!r} is not a valid regex: {}")
        found = []
        for key, spans in rec.threads.items():
            last_end = -math.inf
            for s in spans:
                if s.corr < 0 and rx.search(s.name) and s.start >= last_end:
                    found.append((key, s))
                    last_end = s.end
        if found:
            return sorted(found, key=lambda x: x[1].start), pat
        if pattern:
            names = {s.name for spans in rec.threads.values() for s in spans}
            raise UsageError(f"--steps {pattern!r} matches no host span; closest: {closest_names(pattern, names)}")
    return [], None


def between_steps(keys: list, starts, ends) -> list[tuple]:
    """``(thread key, start, end)`` from each step's end to the next step's start on the same thread (positive
    gaps only); threads in order of first appearance, steps by start: the host time between steps."""
    by: dict = {}
    for k, a, z in zip(keys, starts, ends):
        by.setdefault(k, []).append((a, z))
    out = []
    for k, spans in by.items():
        spans.sort(key=lambda s: s[0])
        run_end = -math.inf
        for (_, z), (b, _) in zip(spans, spans[1:]):
            run_end = max(run_end, z)
            if b > run_end:
                out.append((k, float(run_end), float(b)))
    return out


def between_step_windows(steps: pd.DataFrame) -> pd.DataFrame:
    """``between_steps`` of a ``detect_steps`` table: ``id``, ``pid``, ``tid``, ``start_us``, ``end_us``."""
    gaps = between_steps(list(zip(steps["pid"].tolist(), steps["tid"].tolist())), steps["start_us"].tolist(),
                         steps["end_us"].tolist())
    return pd.DataFrame([(i, p, t, a, b) for i, ((p, t), a, b) in enumerate(gaps)],
                        columns=["id", "pid", "tid", "start_us", "end_us"])


def step_phases(trace: EventTables, steps: pd.DataFrame) -> pd.DataFrame:
    """Host time (us) per annotated phase per step, clipped to the step."""
    cols = ["step", "phase", "count", "host_us"]
    if len(steps) == 0:
        return pd.DataFrame({c: [] for c in cols})
    ev = trace.events
    names = ev["name"]
    frames = {c: m.group(1) for c in names.cat.categories if (m := _PHASE.search(c))}
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
