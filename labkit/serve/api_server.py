"""vLLM's API server as its requests and outputs use it: the event loop, the media pool, the processor's one worker.

More: docs/reference.md, ``labkit.serve.api_server``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

__all__ = ["Intake", "OutputJob", "ApiServer"]


@dataclass(frozen=True)
class Intake:
    """What one request costs vLLM's server before the engine core has it (ns), stage by stage as
    vLLM runs them: its body read and validated on the event loop (``parse_ns``, one request at a
    time; ``arrivals_ns``, where given, when each body was in, as a run measured them), each of its
    ``images`` decoded on the media pool (``image_ns``, ``media_threads`` workers, first in first
    out), then the multimodal processor on its single-worker executor (``process_ns``, one request
    at a time, in the order their images were done; ``process_each_ns``, where given, the k-th
    call's own time); the handover follows the processor."""

    parse_ns: float
    image_ns: float
    process_ns: float
    images: int
    media_threads: int = 8
    process_each_ns: tuple = ()
    arrivals_ns: tuple = ()

    def check(self) -> "Intake":
        if min(self.parse_ns, self.image_ns, self.process_ns, *self.process_each_ns) < 0 or self.images < 0 \
                or self.media_threads < 1:
            raise ValueError("intake costs >= 0, images >= 0, media threads >= 1")
        return self

    def scaled(self, factor: float, stages=("parse_ns", "image_ns", "process_ns")) -> "Intake":
        each = tuple(t * factor for t in self.process_each_ns) if "process_ns" in stages else self.process_each_ns
        return replace(self, process_each_ns=each, **{s: getattr(self, s) * factor for s in stages})


@dataclass(order=True)
class OutputJob:
    """The outputs of one engine step: ready at ``ready_ns``, ``cost_ns`` of the event loop."""

    ready_ns: float
    step: int
    cost_ns: float = field(compare=False)
    deliveries: list = field(compare=False, default_factory=list)
    done_ns: float | None = field(compare=False, default=None)


class ApiServer:
    """``requests`` requests, all sent at t = 0, through :class:`Intake`. The event loop runs the
    requests' parses (in order) and the engine's outputs (:meth:`submit`), an output first when one
    is ready; a parse's end starts that request's images on the pool and its processor work after."""

    def __init__(self, requests: int, intake: Intake) -> None:
        self.intake = intake.check()
        self.handover_ns: list[float | None] = [None] * requests
        self.free_ns = 0.0
        self._parsed = 0
        self._pool = [0.0] * intake.media_threads  # each worker's free time (a heap)
        self._processor_free = 0.0
        self._pending: list[OutputJob] = []
        self.finished_outputs: list[OutputJob] = []
        self.busy_inputs_ns = 0.0
        self.busy_outputs_ns = 0.0

    def _after_parse(self, request: int, at: float) -> None:
        done = at
        for _ in range(self.intake.images):
            start = max(at, heapq.heappop(self._pool))
            heapq.heappush(self._pool, start + self.intake.image_ns)
            done = max(done, start + self.intake.image_ns)
        each = self.intake.process_each_ns
        cost = each[request] if request < len(each) else self.intake.process_ns
        self._processor_free = max(done, self._processor_free) + cost
        self.handover_ns[request] = self._processor_free

    def intake_busy(self, at_ns: float) -> bool:
        """Whether a request is still being parsed, decoded or processed at ``at_ns``."""
        return self._parsed < len(self.handover_ns) or self._processor_free > at_ns

    def submit(self, job: OutputJob) -> None:
        heapq.heappush(self._pending, job)

    def _run_one(self) -> bool:
        """Run the next job the event loop would take at ``free_ns``; False when there is none yet."""
        if self._pending and self._pending[0].ready_ns <= self.free_ns:
            job = heapq.heappop(self._pending)
            self.free_ns += job.cost_ns
            job.done_ns = self.free_ns
            self.busy_outputs_ns += job.cost_ns
            self.finished_outputs.append(job)
            return True
        if self._parsed < len(self.handover_ns):
            arrivals = self.intake.arrivals_ns  # a run's own, where it measured them (its failed requests none)
            self.free_ns = (max(self.free_ns, arrivals[self._parsed]) if self._parsed < len(arrivals)
                            else self.free_ns + self.intake.parse_ns)
            self.busy_inputs_ns += self.intake.parse_ns
            self._after_parse(self._parsed, self.free_ns)
            self._parsed += 1
            return True
        if self._pending:  # idle until the next outputs arrive
            self.free_ns = max(self.free_ns, self._pending[0].ready_ns)
            return self._run_one()
        return False

    def _next_start_ns(self) -> float | None:
        if (self._pending and self._pending[0].ready_ns <= self.free_ns) or self._parsed < len(self.handover_ns):
            return self.free_ns
        return max(self.free_ns, self._pending[0].ready_ns) if self._pending else None

    def advance(self, until_ns: float) -> None:
        """Run every event-loop job that starts before ``until_ns``."""
        while True:
            start = self._next_start_ns()
            if start is None or start >= until_ns or not self._run_one():
                return

    def drain(self) -> None:
        """Run every job submitted (the end of the run)."""
        while self._run_one():
            pass

    def handed_over(self, until_ns: float) -> list[int]:
        """Requests the engine core has by ``until_ns`` (after :meth:`advance`), in handover order."""
        got = [i for i, t in enumerate(self.handover_ns) if t is not None and t <= until_ns]
        return sorted(got, key=lambda i: self.handover_ns[i])

    def next_handover_ns(self, after_ns: float) -> float | None:
        """When the next request is handed over after ``after_ns`` (parsing until one is);
        None when every request was handed over by then."""
        while True:
            later = [t for t in self.handover_ns if t is not None and t > after_ns]
            if later:  # handovers come in parse order: none parsed later can come before
                return min(later)
            if self._parsed == len(self.handover_ns):
                return None
            self._run_one()
