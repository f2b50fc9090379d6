"""The simulated clock: an engine driven step by step, each step's time from the one step model.

More: docs/reference.md, ``labkit.serve.clock``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from labkit.serve.api_server import ApiServer, Intake, OutputJob
from labkit.step_model import ScheduledStep, StepShape, planned_ahead, step_time

__all__ = ["EngineDriver", "HostModel", "StepTiming", "Timeline", "simulate"]


class EngineDriver(Protocol):
    def add_request(self, index: int) -> None: ...

    def has_work(self) -> bool: ...

    def step(self) -> ScheduledStep | None:
        """Plan (and, synchronous, finish) one step; None when nothing could be scheduled."""

    def flush(self) -> tuple:
        """Deliveries of the step still in flight (async), or ()."""


class HostModel(Protocol):
    def core_ns(self, shape: StepShape) -> float:
        """The engine core's serial host chain of a step."""

    def frontend_ns(self, outputs: int) -> float:
        """The API server's output processing of one step's outputs for ``outputs`` requests."""


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

    @property
    def host_bound(self) -> bool:
        return self.core_host_ns > self.device_ns


@dataclass
class Timeline:
    """The run on the simulated clock: token arrival times per request (ns), steps, handovers."""

    token_ns: list
    handover_ns: list
    steps: list
    api_busy_inputs_ns: float = 0.0
    api_busy_outputs_ns: float = 0.0
    regime: str = "async"


def simulate(driver: EngineDriver, *, requests: int, intake: Intake, host: HostModel,
             device: Callable[[StepShape], float], regime: str = "async", intake_slows_device: float = 1.0,
             non_overlap_ns: float = 0.0, max_steps: int = 10_000_000, on_step: Callable[[StepTiming], None] | None = None) -> Timeline:
    """Run ``driver``'s ``requests`` requests (handed over as vLLM's server would, see
    :class:`~labkit.serve.api_server.ApiServer`; every one to its end) on the simulated clock;
    ``on_step`` sees each step's timing as it is made. ``intake_slows_device``: the device's time
    is that many times longer for a step that starts while the intake still works (where the
    device is the same CPU as the intake: vLLM's CPU build). ``non_overlap_ns``: the step model's
    term for what neither side hides (:func:`labkit.step_model.step_time`)."""
    api = ApiServer(requests, intake)
    ahead = planned_ahead(regime)
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
        if rec is None:  # nothing to plan: the step in flight comes back first
            got = driver.flush()
            deliver(got)
            submit(None)
            if not got and driver.has_work():
                nxt = api.next_handover_ns(t)
                if nxt is None:
                    raise RuntimeError("the engine holds requests but schedules nothing and none can join")
                t = max(t, nxt)
            continue
        core, dev = float(host.core_ns(rec.shape)), float(device(rec.shape))
        if api.intake_busy(t):
            dev *= intake_slows_device
        end = t + step_time(dev, core, regime, non_overlap_ns).step_ns
        jobs[rec.index] = OutputJob(end, rec.index, 0.0)
        waiting.append(rec.index)
        steps.append(StepTiming(rec.index, t, end, dev, core, len(rec.shape.decode_context_lens),
                                rec.shape.prefill_tokens, rec.shape.images_encoded, added))
        if on_step is not None:
            on_step(steps[-1])
        deliver(rec.deliveries)
        # async: this step's outputs come with the next step's plan; sync: with this one
        submit(rec.index + 1 - ahead)
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
    return Timeline(token_ns, list(api.handover_ns), steps, api.busy_inputs_ns, api.busy_outputs_ns, regime)
