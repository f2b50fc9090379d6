"""The API server's one thread: every request's input processing, and the engine's outputs.

More: docs/reference.md, ``labkit.serve.api_server``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

__all__ = ["OutputJob", "ApiServer", "media_first_jobs"]


def media_first_jobs(media_ns: list[float], process_ns: list[float]) -> list[tuple]:
    """The input jobs ``(ns, request handed over when it ends or None, index of the job that must
    end first or None)``: every request's image decode, then each request's processor work."""
    if len(media_ns) != len(process_ns):
        raise ValueError("one media and one processing time per request")
    return [(float(m), None, None) for m in media_ns] + [(float(p), i, i) for i, p in enumerate(process_ns)]


@dataclass(order=True)
class OutputJob:
    """The outputs of one engine step: ready at ``ready_ns``, ``cost_ns`` of the thread."""

    ready_ns: float
    step: int
    cost_ns: float = field(compare=False)
    deliveries: list = field(compare=False, default_factory=list)
    done_ns: float | None = field(compare=False, default=None)


class ApiServer:
    """One thread; ``input_ns[i]`` the whole input processing of request ``i`` (all in at t = 0), or
    ``jobs`` (:func:`media_first_jobs`). The thread takes the first listed input job whose
    prerequisite has ended, so it never idles while one is ready."""

    def __init__(self, input_ns: list[float] | None = None, *, jobs: list[tuple] | None = None) -> None:
        if (input_ns is None) == (jobs is None):
            raise ValueError("give input_ns or jobs")
        self.jobs = [(float(ns), i, None) for i, ns in enumerate(input_ns)] if jobs is None else list(jobs)
        requests = sorted(j[1] for j in self.jobs if j[1] is not None)
        if requests != list(range(len(requests))):
            raise ValueError("every request 0..n-1 must be handed over by exactly one job")
        if any(after is not None and not 0 <= after < k for k, (_, _, after) in enumerate(self.jobs)):
            raise ValueError("a job can wait only for one listed before it")
        self.handover_ns: list[float | None] = [None] * len(requests)
        self.free_ns = 0.0
        self._ended: list[float | None] = [None] * len(self.jobs)
        self._todo = list(range(len(self.jobs)))
        self._pending: list[OutputJob] = []
        self.finished_outputs: list[OutputJob] = []
        self.busy_inputs_ns = 0.0
        self.busy_outputs_ns = 0.0

    def submit(self, job: OutputJob) -> None:
        heapq.heappush(self._pending, job)

    def _ready_input(self) -> int | None:
        for k in self._todo:
            after = self.jobs[k][2]
            if after is None or self._ended[after] is not None:
                return k
        return None

    def _run_one(self) -> bool:
        """Run the next job the thread would take at ``free_ns``; False when there is none yet."""
        if self._pending and self._pending[0].ready_ns <= self.free_ns:
            job = heapq.heappop(self._pending)
            self.free_ns += job.cost_ns
            job.done_ns = self.free_ns
            self.busy_outputs_ns += job.cost_ns
            self.finished_outputs.append(job)
            return True
        k = self._ready_input()
        if k is not None:
            ns, request, _ = self.jobs[k]
            self._todo.remove(k)
            self.free_ns += ns
            self.busy_inputs_ns += ns
            self._ended[k] = self.free_ns
            if request is not None:
                self.handover_ns[request] = self.free_ns
            return True
        if self._pending:  # idle until the next outputs arrive
            self.free_ns = max(self.free_ns, self._pending[0].ready_ns)
            return self._run_one()
        return False

    def _next_start_ns(self) -> float | None:
        if (self._pending and self._pending[0].ready_ns <= self.free_ns) or self._ready_input() is not None:
            return self.free_ns
        return max(self.free_ns, self._pending[0].ready_ns) if self._pending else None

    def advance(self, until_ns: float) -> None:
        """Run every job that starts before ``until_ns``."""
        while True:
            start = self._next_start_ns()
            if start is None or start >= until_ns or not self._run_one():
                return

    def drain(self) -> None:
        """Run every job submitted (the end of the run)."""
        while self._run_one():
            pass

    def handed_over(self, until_ns: float) -> list[int]:
        """Requests whose inputs are done by ``until_ns`` (after :meth:`advance`)."""
        return [i for i, t in enumerate(self.handover_ns) if t is not None and t <= until_ns]

    def next_handover_ns(self, after_ns: float) -> float | None:
        """When the next request is handed over after ``after_ns`` (running jobs until one is);
        None when every request was handed over by then."""
        while True:
            later = [t for t in self.handover_ns if t is not None and t > after_ns]
            if later:
                return min(later)
            if not self._todo:
                return None
            self._run_one()
