"""Wrapper timers on vLLM's engine step: host time of each phase, per step, without the profiler.

More: docs/reference.md, ``labkit.vllm.census.step_timers``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from labkit.timing import clock_ns

__all__ = ["TIMED_PHASES", "SPAN_PHASES", "StepRecord", "PhaseTimers", "engine_parts"]

#: (phase, object of :func:`engine_parts`, attribute) wrapped by :class:`PhaseTimers`
TIMED_PHASES = (
    ("step", "engine", "step"),
    ("schedule", "scheduler", "schedule"),
    ("encoder_inputs", "scheduler", "_try_schedule_encoder_inputs"),
    ("execute_model", "executor", "execute_model"),
    ("update_states", "runner", "_update_states"),
    ("prepare_inputs_fn", "runner", "_prepare_inputs"),
    ("attention_metadata", "runner", "_build_attention_metadata"),
    ("preprocess", "runner", "_preprocess"),
    ("encoder", "runner", "_execute_mm_encoder"),
    ("model_forward", "runner", "_model_forward"),
    ("logits", "model", "compute_logits"),
    ("sample", "executor", "sample_tokens"),
    ("sampler", "runner", "_sample"),
    ("bookkeeping", "runner", "_bookkeeping_sync"),
    ("update_from_output", "scheduler", "update_from_output"),
    ("process_outputs", "output_processor", "process_outputs"),
    ("detokenize", "detokenizer_class", "update"),
)
#: (phase, object, attribute) of methods that return a context manager: the phase is the time from
#: entering the context they return to leaving it
SPAN_PHASES = (
    ("input_prep", "runner", "synchronize_input_prep"),
)


def engine_parts(llm) -> dict:
    """The live objects of an in-process ``vllm.LLM`` whose methods make the step's phases."""
    from vllm.v1.engine.detokenizer import BaseIncrementalDetokenizer

    engine = llm.llm_engine
    core = getattr(engine.engine_core, "engine_core", None)
    if core is None:
        raise RuntimeError("the engine core is not in this process: set VLLM_ENABLE_V1_MULTIPROCESSING=0")
    executor = core.model_executor
    runner = executor.driver_worker.worker.model_runner
    return {"engine": engine, "scheduler": core.scheduler, "executor": executor, "runner": runner,
            "model": runner.model, "output_processor": engine.output_processor,
            "detokenizer_class": BaseIncrementalDetokenizer}


@dataclass
class StepRecord:
    """One ``LLMEngine.step()``: ns per phase, and what its schedule held."""

    phases_ns: dict = field(default_factory=dict)
    requests: int = 0
    tokens: int = 0
    decode_only: bool = False


class PhaseTimers:
    """Context manager: while inside, every ``LLMEngine.step()`` of ``llm`` appends a :class:`StepRecord`.

    ``parts``: the objects to wrap (default :func:`engine_parts` of ``llm``); ``phases`` /
    ``spans``: what to wrap (:data:`TIMED_PHASES` / :data:`SPAN_PHASES`); ``clock``: ns."""

    def __init__(self, llm=None, phases=TIMED_PHASES, clock=clock_ns, parts: dict | None = None,
                 spans=SPAN_PHASES) -> None:
        self.parts = parts if parts is not None else engine_parts(llm)
        self.phases = tuple(phases)
        self.spans = tuple(spans)
        self.clock = clock
        self.steps: list[StepRecord] = []
        self._current: StepRecord | None = None
        self._depth: dict[str, int] = {}
        self._saved: list = []

    def _add(self, phase: str, dt: int) -> None:
        rec = self._current
        if rec is not None:
            rec.phases_ns[phase] = rec.phases_ns.get(phase, 0) + dt

    def _wrap_span(self, phase: str, inner):
        timers, clock = self, self.clock

        @contextlib.contextmanager
        def timed(*args, **kwargs):
            if timers._depth.get(phase, 0):  # nested in a span of the same phase: already timed
                with inner(*args, **kwargs) as value:
                    yield value
                return
            timers._depth[phase] = 1
            t0 = clock()
            try:
                with inner(*args, **kwargs) as value:
                    yield value
            finally:
                dt = clock() - t0
                timers._depth[phase] = 0
                timers._add(phase, dt)

        return timed

    def _wrap(self, phase: str, inner, is_step: bool, is_schedule: bool):
        timers, clock = self, self.clock

        def timed(*args, **kwargs):
            if timers._depth.get(phase, 0):  # nested in a call of the same phase: already timed
                return inner(*args, **kwargs)
            if is_step:
                timers._current = StepRecord()
            timers._depth[phase] = 1
            t0 = clock()
            try:
                out = inner(*args, **kwargs)
            finally:
                dt = clock() - t0
                timers._depth[phase] = 0
                timers._add(phase, dt)
            if is_schedule and timers._current is not None:
                timers._current._schedule_out = out
            if is_step and timers._current is not None:
                timers._finish(timers._current)
            return out

        return timed

    def _finish(self, rec: StepRecord) -> None:
        out = rec.__dict__.pop("_schedule_out", None)
        if out is not None:
            tokens = out.num_scheduled_tokens
            rec.requests, rec.tokens = len(tokens), int(out.total_num_scheduled_tokens)
            rec.decode_only = bool(tokens) and not out.scheduled_new_reqs and all(n == 1 for n in tokens.values())
        self.steps.append(rec)
        self._current = None

    def __enter__(self) -> "PhaseTimers":
        for phase, part, attr in self.phases:
            owner = self.parts[part]
            inner = getattr(owner, attr)
            if isinstance(owner, type):  # a class: wrap the function, keep it a method
                inner = vars(owner).get(attr, inner)
            self._saved.append((owner, attr, attr in vars(owner), vars(owner).get(attr)))
            setattr(owner, attr, self._wrap(phase, inner, phase == "step", phase == "schedule"))
        for phase, part, attr in self.spans:
            owner = self.parts[part]
            self._saved.append((owner, attr, attr in vars(owner), vars(owner).get(attr)))
            setattr(owner, attr, self._wrap_span(phase, getattr(owner, attr)))
        return self

    def __exit__(self, *exc) -> None:
        from labkit.vllm.ab import restore_attrs

        restore_attrs(self._saved)
        self._saved.clear()
