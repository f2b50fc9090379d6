"""``labkit whatif`` on a host-only trace (vLLM's CPU engine, no device stream), from Python."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from labkit.errors import UsageError
from labkit.trace.analysis.host.steps import find_step_spans
from labkit.trace.read.load import as_trace
from labkit.trace.whatif.changes import parse_changes
from labkit.trace.whatif.dependency_graph import trace_graph
from labkit.trace.whatif.predict import predict
from labkit.trace.whatif.reads import find_placeholder_reads

__all__ = ["HostOnlyPrediction", "predict_host_only"]


@dataclass(frozen=True)
class HostOnlyPrediction:
    """Measured and predicted median step-to-step host time of one trace (ms)."""

    measured_step_ms: float
    predicted_step_ms: float
    arguments: str  #: the ``labkit whatif`` arguments that make the same prediction
    steps: int  #: steps in the trace
    reads: dict | None  #: the placeholder reads found (``PlaceholderReads.to_json``), None: none
    replay_error: float  #: the unchanged replay's largest step error (its self-check)

    @property
    def speedup(self) -> float:
        return self.measured_step_ms / self.predicted_step_ms if self.predicted_step_ms else float("inf")


def predict_host_only(trace, scale: Mapping[str, float] | None = None, *,
                      steps: str | None = None) -> HostOnlyPrediction:
    """Replay a host-only trace (path or ``Trace``) with ``scale`` (``{regex: factor}``, each as
    ``labkit whatif --scale REGEX=FACTOR``; default: the placeholder reads removed) and return the
    measured and predicted median step time. ``steps``: the step-span regex (default: vLLM's
    ``execute_*`` spans, else ``ProfilerStep#N``). ``UsageError`` for a trace with device events,
    without steps, without placeholder reads (default ``scale``), or a pattern that matches nothing."""
    tr = as_trace(trace)
    rec, g = trace_graph(tr)
    if rec.ops:
        raise UsageError(f"{rec.file}: has device events; predict_host_only is for host-only traces "
                         "(use labkit.trace.whatif.predict.predict)")
    step_spans, _ = find_step_spans(rec, steps)
    if not step_spans:
        raise UsageError(f"{rec.file}: no step spans to time")
    reads = find_placeholder_reads(g, step_spans)
    if scale is None:
        if reads is None:
            raise UsageError(f"{rec.file}: no placeholder reads (get_num_embeds frames, or aten::item inside "
                             "schedule) to remove; pass scale=")
        changes = [reads.change]
    else:
        changes = parse_changes([f"{k}={v}" for k, v in scale.items()])
    w = predict(tr, changes, steps=steps)
    return HostOnlyPrediction(measured_step_ms=w.measured["step_ms_median"],
                              predicted_step_ms=w.predicted["step_ms_median"],
                              arguments=" ".join(c.argument() for c in changes), steps=w.steps["count"],
                              reads=reads.to_json() if reads is not None else None,
                              replay_error=w.replay_check["step_ms_error"])


def host_only_rows(prediction: HostOnlyPrediction, after_measured_ms: float | None = None) -> list[dict]:
    """The what-if of a host-only trace as table rows (``run``, ``step_ms``, ``source``): the trace as
    measured, its prediction with the change, and where given the other run as measured (ms)."""
    rows = [{"run": "baseline, as measured", "step_ms": prediction.measured_step_ms, "source": "measured-cpu"},
            {"run": f"baseline with {prediction.arguments} (whatif)", "step_ms": prediction.predicted_step_ms,
             "source": "simulated"}]
    if after_measured_ms is not None:
        rows.append({"run": "merged, as measured", "step_ms": after_measured_ms, "source": "measured-cpu"})
    return rows
