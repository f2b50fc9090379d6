"""The API server's one thread: every request's input processing, and the engine's outputs.

In ``vllm serve`` the API server is a process of its own whose event loop does, on one thread,
each request's input processing (image decode, the HF processor, hashing) and the output
processing of every engine step (detokenizing, streaming each request's new tokens). A request
reaches the engine core when its input processing ends. The input jobs run in one of three orders
(:data:`API_ORDERS`):

``one-after-another``
    each request's whole input processing, request by request in the order they came;
``media-first``
    every request's image decode first (vLLM's media loading pool takes them as the handlers
    start), then each request's processor work, request by request: what the real server's
    handovers look like (``labkit bench vllm-handover``: the first handover at about half the
    last, then one after another).
``side-by-side``
    a bound, not vLLM's code (its processor runs on one worker, request by request): every
    request's input processing cut into ``slices`` equal parts (one per image), taken in turn
    across the requests whose bodies are in, so each request is handed over only when the
    thread has done nearly all of the intake; the shape the published finish spread of #40143
    asks for (every request handed over within a short window at the end).

The engine's outputs of a step wait for the thread: when the thread
finishes a job it first takes the output jobs that arrived before that moment (the loop's
output handler wakes when the engine's outputs arrive), then the next request's inputs. Jobs
never preempt each other. A step's tokens reach the client when its output job ends.

With ``merge_outputs`` the thread takes every output job waiting for it at once, as vLLM's
output handler does (it drains the engine's outputs queued for it, each through the output
processor, before the request streams run; each stream then sends what it gathered as one
chunk): the merged job costs the sum of the jobs' per-step parts (``cost_ns``) plus one chunk
(``stream_per_request_ns``) per request with tokens in any of them, and all end together.

:class:`ApiServer` is advanced lazily by the clock: :meth:`ApiServer.advance` runs every job
that starts before a given time, which is exact because every output job that could start
before that time has been submitted by then.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

__all__ = ["API_ORDERS", "OutputJob", "ApiServer", "input_jobs"]

API_ORDERS = ("media-first", "one-after-another", "side-by-side")


def input_jobs(media_ns: list[float], process_ns: list[float], order: str, *, parse_ns: list[float] | None = None,
               body_ns: list[float] | None = None, slices: int = 1) -> list[tuple]:
    """The API server's input jobs ``(ns, request handed over when it ends or None, not before ns,
    index of the job that must end first or None)`` for requests whose image decode costs
    ``media_ns[i]`` and the rest ``process_ns[i]``, in ``order``. With ``parse_ns`` each request
    first has its HTTP body parsed (before its handler starts: its image decode waits for it), not
    before its body is in (``body_ns[i]``, default 0). ``side-by-side`` cuts each request's whole
    processing into ``slices`` jobs."""
    n = len(media_ns)
    if len(process_ns) != n or (parse_ns is not None and len(parse_ns) != n) or (body_ns is not None and len(body_ns) != n):
        raise ValueError("one media, processing, parse and body time per request")
    body = body_ns if body_ns is not None else [0.0] * n
    jobs: list[tuple] = []
    parsed: list = [None] * n
    if parse_ns is not None:
        for i in range(n):
            parsed[i] = len(jobs)
            jobs.append((parse_ns[i], None, body[i], None))
    ready = [0.0 if parse_ns is not None else body[i] for i in range(n)]
    if order == "one-after-another":
        return jobs + [(m + p, i, ready[i], parsed[i]) for i, (m, p) in enumerate(zip(media_ns, process_ns))]
    if order == "media-first":
        first = len(jobs)
        jobs += [(m, None, ready[i], parsed[i]) for i, m in enumerate(media_ns)]
        return jobs + [(p, i, 0.0, first + i) for i, p in enumerate(process_ns)]
    if order == "side-by-side":
        if slices < 1:
            raise ValueError("side-by-side needs at least one slice per request")
        last = list(parsed)
        for k in range(slices):
            for i, (m, p) in enumerate(zip(media_ns, process_ns)):
                jobs.append(((m + p) / slices, i if k == slices - 1 else None, ready[i] if k == 0 else 0.0, last[i]))
                last[i] = len(jobs) - 1
        return jobs
    raise ValueError(f"API server order must be one of {', '.join(API_ORDERS)}, got {order!r}")


@dataclass(order=True)
class OutputJob:
    """The outputs of one engine step: ready at ``ready_ns``, ``cost_ns`` of the thread."""

    ready_ns: float
    step: int
    cost_ns: float = field(compare=False)
    deliveries: list = field(compare=False, default_factory=list)
    done_ns: float | None = field(compare=False, default=None)
    stream_per_request_ns: float = field(compare=False, default=0.0)


class ApiServer:
    """One thread; ``input_ns[i]`` the input processing of request ``i`` (all sent at t = 0), or ``jobs``:
    the input jobs (:func:`input_jobs`; ``(ns, request)`` pairs are taken as ready at once). Of the
    input jobs the thread takes the first in the list that is ready (its time has come and the job
    it waits for has ended), so it never idles while one is."""

    def __init__(self, input_ns: list[float] | None = None, *, jobs: list[tuple[float, int | None]] | None = None,
                 merge_outputs: bool = False) -> None:
        if (input_ns is None) == (jobs is None):
            raise ValueError("give input_ns or jobs")
        raw = [(float(ns), i) for i, ns in enumerate(input_ns)] if jobs is None else list(jobs)
        self.jobs = [(float(j[0]), j[1], float(j[2]) if len(j) > 2 else 0.0, j[3] if len(j) > 3 else None)
                     for j in raw]
        requests = sorted(j[1] for j in self.jobs if j[1] is not None)
        if requests != list(range(len(requests))):
            raise ValueError("every request 0..n-1 must be handed over by exactly one job")
        if any(after is not None and not 0 <= after < k for k, (*_, after) in enumerate(self.jobs)):
            raise ValueError("a job can wait only for one listed before it")
        self.input_ns = [j[0] for j in self.jobs]
        self.handover_ns: list[float | None] = [None] * len(requests)
        self.free_ns = 0.0
        self._ended: list[float | None] = [None] * len(self.jobs)
        self._todo = list(range(len(self.jobs)))
        self.next_input = 0  #: input jobs done
        self._pending: list[OutputJob] = []
        self.finished_outputs: list[OutputJob] = []
        self.busy_inputs_ns = 0.0
        self.busy_outputs_ns = 0.0
        self.merge_outputs = merge_outputs
        self.merged_jobs = 0  #: output jobs that ran merged with an earlier one

    def submit(self, job: OutputJob) -> None:
        heapq.heappush(self._pending, job)

    def _run_one(self) -> bool:
        """Run the next job the thread would take at ``free_ns``; False when there is none yet."""
        if self._pending and self._pending[0].ready_ns <= self.free_ns:
            batch = [heapq.heappop(self._pending)]
            while self.merge_outputs and self._pending and self._pending[0].ready_ns <= self.free_ns:
                batch.append(heapq.heappop(self._pending))
            streams = {d.request for job in batch for d in job.deliveries}
            cost = sum(job.cost_ns for job in batch)
            cost += max(job.stream_per_request_ns for job in batch) * len(streams)
            done = self.free_ns + cost
            for job in batch:
                job.done_ns = done
            self.free_ns = done
            self.busy_outputs_ns += cost
            self.merged_jobs += len(batch) - 1
            self.finished_outputs.extend(batch)
            return True
        k = self._ready_input()
        if k is not None:
            ns, request, _, _ = self.jobs[k]
            self._todo.remove(k)
            self.free_ns += ns
            self.busy_inputs_ns += ns
            self._ended[k] = self.free_ns
            if request is not None:
                self.handover_ns[request] = self.free_ns
            self.next_input += 1
            return True
        nxt = [t for t in (self._next_input_ns(), self._pending[0].ready_ns if self._pending else None) if t is not None]
        if nxt:
            # idle until the next outputs arrive or the next input job is ready
            self.free_ns = max(self.free_ns, min(nxt))
            return self._run_one()
        return False

    def _ready_input(self) -> int | None:
        """The first listed input job ready at ``free_ns``."""
        for k in self._todo:
            _, _, not_before, after = self.jobs[k]
            if not_before <= self.free_ns and (after is None or self._ended[after] is not None):
                return k
        return None

    def _next_input_ns(self) -> float | None:
        """When the next input job whose prerequisite has ended becomes ready (None: none left)."""
        times = [self.jobs[k][2] for k in self._todo if self.jobs[k][3] is None or self._ended[self.jobs[k][3]] is not None]
        return min(times) if times else None

    def _next_start_ns(self) -> float | None:
        """When the thread starts its next job (None: nothing left that could start)."""
        if (self._pending and self._pending[0].ready_ns <= self.free_ns) or self._ready_input() is not None:
            return self.free_ns
        nxt = [t for t in (self._next_input_ns(), self._pending[0].ready_ns if self._pending else None) if t is not None]
        return max(self.free_ns, min(nxt)) if nxt else None

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
