"""The API server's one thread: every request's input processing, and the engine's outputs.

In ``vllm serve`` the API server is a process of its own whose event loop does, on one thread,
each request's input processing (image decode, the HF processor, hashing: a blocking call per
request, in the order the requests came) and the output processing of every engine step
(detokenizing, streaming each request's new tokens). A request reaches the engine core when its
input processing ends. The engine's outputs of a step wait for the thread: when the thread
finishes a job it first takes the output jobs that arrived before that moment (the loop's
output handler wakes when the engine's outputs arrive), then the next request's inputs. Jobs
never preempt each other. A step's tokens reach the client when its output job ends.

:class:`ApiServer` is advanced lazily by the clock: :meth:`ApiServer.advance` runs every job
that starts before a given time, which is exact because every output job that could start
before that time has been submitted by then.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

__all__ = ["OutputJob", "ApiServer"]


@dataclass(order=True)
class OutputJob:
    """The outputs of one engine step: ready at ``ready_ns``, ``cost_ns`` of the thread."""

    ready_ns: float
    step: int
    cost_ns: float = field(compare=False)
    deliveries: list = field(compare=False, default_factory=list)
    done_ns: float | None = field(compare=False, default=None)


class ApiServer:
    """One thread; ``input_ns[i]`` the input processing of request ``i`` (all sent at t = 0)."""

    def __init__(self, input_ns: list[float]) -> None:
        self.input_ns = list(input_ns)
        self.handover_ns: list[float | None] = [None] * len(self.input_ns)
        self.free_ns = 0.0
        self.next_input = 0
        self._pending: list[OutputJob] = []
        self.finished_outputs: list[OutputJob] = []
        self.busy_inputs_ns = 0.0
        self.busy_outputs_ns = 0.0

    def submit(self, job: OutputJob) -> None:
        heapq.heappush(self._pending, job)

    def _run_one(self) -> bool:
        """Run the next job the thread would take at ``free_ns``; False when there is none yet."""
        if self._pending and self._pending[0].ready_ns <= self.free_ns:
            job = heapq.heappop(self._pending)
            job.done_ns = self.free_ns + job.cost_ns
            self.free_ns = job.done_ns
            self.busy_outputs_ns += job.cost_ns
            self.finished_outputs.append(job)
            return True
        if self.next_input < len(self.input_ns):
            i = self.next_input
            self.free_ns += self.input_ns[i]
            self.busy_inputs_ns += self.input_ns[i]
            self.handover_ns[i] = self.free_ns
            self.next_input += 1
            return True
        if self._pending:
            # idle until the next outputs arrive
            self.free_ns = max(self.free_ns, self._pending[0].ready_ns)
            return self._run_one()
        return False

    def advance(self, until_ns: float) -> None:
        """Run every job that starts before ``until_ns``."""
        while self.free_ns < until_ns:
            if self._pending and self._pending[0].ready_ns > self.free_ns and self.next_input >= len(self.input_ns):
                if self._pending[0].ready_ns >= until_ns:
                    return
            if not self._run_one():
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
            if self.next_input >= len(self.input_ns):
                return None
            self._run_one()
