"""The simulated clock: an engine driven step by step, each step's time from its host and device.

The clock runs any :class:`EngineDriver` (vLLM's real scheduler, :mod:`labkit.serve.vllm_driver`,
or a hand-made one in the tests) against the API server's thread
(:class:`labkit.serve.api_server.ApiServer`), a host model and a device model:

- before each step, the requests whose input processing ended by the step's start join the
  engine (with async scheduling step n+1 is planned while step n runs; the clock admits at the
  step's start, the end of the previous step, for both modes);
- a step costs ``max(device, engine-core host)`` with async scheduling (vLLM's default on a GPU:
  the core plans and prepares step n+1 while the device runs step n, :mod:`labkit.mm.overlap`'s
  convention with no part that cannot overlap) and ``host + device`` without;
- the engine core waits, idle, when it holds no request;
- each step's outputs become an output job of the API server, ready at the step's end; the
  tokens reach the client when that job ends (:class:`~labkit.serve.api_server.ApiServer`).

Times are ns from the moment every request was sent (t = 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from labkit.serve.api_server import ApiServer, OutputJob
from labkit.serve.device import StepShape

__all__ = ["Delivery", "StepRecord", "EngineDriver", "HostModel", "StepTiming", "Timeline", "simulate"]


@dataclass(frozen=True)
class Delivery:
    """New tokens for one request in the outputs of step ``step``; ``finished`` when it is its last."""

    step: int
    request: int
    tokens: int
    finished: bool = False


@dataclass(frozen=True)
class StepRecord:
    """One scheduled step: its shape, the host ns measured for it here (``measured_ns``: phase ->
    ns, e.g. the scheduler's own calls), and the deliveries that became known with it (of this
    step with synchronous scheduling, of the previous one with async)."""

    index: int
    shape: StepShape
    measured_ns: dict = field(default_factory=dict)
    deliveries: tuple = ()


class EngineDriver(Protocol):
    """An engine the clock steps: requests join with :meth:`add_request`."""

    def add_request(self, index: int) -> None: ...

    def has_work(self) -> bool: ...

    def step(self) -> StepRecord | None:
        """Plan (and, synchronous, finish) one step; None when nothing could be scheduled."""

    def flush(self) -> tuple:
        """Deliveries of the step still in flight (async), or ()."""


class HostModel(Protocol):
    """Host ns of a step: the engine core's serial chain by phase, and the API server's output job."""

    def core_ns(self, rec: StepRecord) -> dict: ...

    def frontend_ns(self, outputs: int) -> float:
        """The API server's output processing of one step's outputs for ``outputs`` requests (a host
        model may also have ``stream_ns_per_request(outputs)``: each stream's chunk, see
        :class:`~labkit.serve.api_server.ApiServer`)."""


@dataclass(frozen=True)
class StepTiming:
    """What the clock did with one step (ns)."""

    index: int
    start_ns: float
    end_ns: float
    device_ns: float
    core_host_ns: float
    decode_requests: int
    prefill_tokens: int
    images_encoded: int
    admitted: int  #: requests in the engine by this step
    finished_before: int  #: requests finished before this step started

    @property
    def host_bound(self) -> bool:
        return self.core_host_ns > self.device_ns


@dataclass
class Timeline:
    """The run on the simulated clock: token arrival times per request (ns), steps, handovers."""

    token_ns: list  #: per request, per token, when the client got it
    handover_ns: list  #: per request, when its inputs were done
    steps: list
    api_busy_inputs_ns: float = 0.0
    api_busy_outputs_ns: float = 0.0
    async_scheduling: bool = True
    api_merged_jobs: int = 0
    start_ns: list | None = None  #: per request, when the client started it (None: all at t = 0)

    def starts_ns(self) -> list:
        return list(self.start_ns) if self.start_ns is not None else [0.0] * len(self.token_ns)


def simulate(driver: EngineDriver, *, input_ns: list[float] | None = None, host: HostModel,
             device: Callable[[StepShape], float], async_scheduling: bool = True,
             max_steps: int = 10_000_000, on_step: Callable[[StepTiming], None] | None = None,
             input_jobs: list | None = None, merge_outputs: bool = False,
             start_ns: list[float] | None = None) -> Timeline:
    """Run ``driver``'s requests (``len(input_ns)``, or those ``input_jobs`` hand over: see
    :class:`~labkit.serve.api_server.ApiServer`; every one to its end) on the simulated clock;
    ``on_step`` sees each step's timing as it is made (progress); ``merge_outputs``: the API server
    takes every output job waiting for it at once; ``start_ns``: when the client started each request
    (kept in the timeline; its TTFT counts from there)."""
    api = ApiServer(input_ns, jobs=input_jobs, merge_outputs=merge_outputs)
    stream_ns = getattr(host, "stream_ns_per_request", None)
    n = len(api.handover_ns)
    jobs: dict = {}  # step -> its output job
    waiting: list = []  # steps whose output jobs wait for their deliveries
    steps: list = []
    added = finished = 0
    t = 0.0

    def deliver(deliveries) -> None:
        nonlocal finished
        for d in deliveries:
            jobs[d.step].deliveries.append(d)
            finished += int(d.finished)

    def submit(upto: int | None) -> None:
        """Hand the API server the output jobs of the steps before ``upto`` (all when None)."""
        keep = []
        for s in waiting:
            if upto is not None and s >= upto:
                keep.append(s)
                continue
            job = jobs[s]
            job.cost_ns = float(host.frontend_ns(len(job.deliveries))) if job.deliveries else 0.0
            if job.deliveries and stream_ns is not None:
                job.stream_per_request_ns = float(stream_ns(len(job.deliveries)))
            api.submit(job)
        waiting[:] = keep

    for _ in range(max_steps):
        api.advance(t)
        handed = api.handed_over(t)
        for i in handed[added:]:
            driver.add_request(i)
        added = len(handed)
        if finished >= n:
            break
        if not driver.has_work():
            nxt = api.next_handover_ns(t)
            if nxt is None:
                raise RuntimeError("no request is left to join, yet not every request finished")
            t = max(t, nxt)
            continue
        rec = driver.step()
        if rec is None:
            # nothing to plan: the step in flight comes back first
            got = driver.flush()
            deliver(got)
            submit(None)
            if not got and driver.has_work():
                nxt = api.next_handover_ns(t)
                if nxt is None:
                    raise RuntimeError("the engine holds requests but schedules nothing and none can join")
                t = max(t, nxt)
            continue
        core_by_phase = host.core_ns(rec)
        core = float(sum(core_by_phase.values()))
        dev = float(device(rec.shape))
        end = t + (max(core, dev) if async_scheduling else core + dev)
        jobs[rec.index] = OutputJob(end, rec.index, 0.0)
        waiting.append(rec.index)
        steps.append(StepTiming(rec.index, t, end, dev, core, len(rec.shape.decode_context_lens),
                                rec.shape.prefill_tokens, rec.shape.images_encoded, added, finished))
        if on_step is not None:
            on_step(steps[-1])
        deliver(rec.deliveries)
        # async: this step's outputs come with the next step's plan; sync: with this one
        submit(rec.index if async_scheduling else None)
        t = end
    else:
        raise RuntimeError(f"the run did not finish in {max_steps} steps")
    deliver(driver.flush())
    submit(None)
    api.drain()
    token_ns: list = [[] for _ in range(n)]
    for job in sorted(api.finished_outputs, key=lambda j: j.done_ns):
        for d in job.deliveries:
            token_ns[d.request].extend([job.done_ns] * d.tokens)
    if start_ns is not None and len(start_ns) != n:
        raise ValueError("one start time per request")
    return Timeline(token_ns, list(api.handover_ns), steps, api.busy_inputs_ns, api.busy_outputs_ns,
                    async_scheduling, api.merged_jobs, None if start_ns is None else list(start_ns))
