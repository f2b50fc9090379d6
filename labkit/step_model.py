"""The one step model: how an engine step's host time and device time become its wall time.

Async scheduling (vLLM's default since 0.14): the engine core plans and prepares step n+1 while
the device runs step n, so a step takes ``max(device, host) + non_overlap``. Sync scheduling: they
add, ``device + host + non_overlap``. ``non_overlap`` is whatever cannot hide behind the other
side (`labkit bench vllm-overlap` measures it in vLLM's engine core; serve-sim's peaks take that, the others pass 0). Every part of labkit that turns
host and device time into step time calls :func:`step_time`; the mini engine, which simulates its
own device, plans :func:`planned_ahead` steps ahead. Reasoning: docs/serve-sim.md.

What a step computes, for the device model: :class:`StepShape`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.errors import UsageError, choice

__all__ = ["REGIMES", "StepShape", "Step", "step_time", "both_regimes", "planned_ahead", "peak_tokens_per_s"]

REGIMES = ("async", "sync")


@dataclass(frozen=True)
class StepShape:
    """What one engine step computes: per decoding request its context length (tokens in the KV
    cache before the step), per prefill chunk ``(tokens, context before, ends the prompt)``,
    images encoded."""

    decode_context_lens: tuple = ()
    prefill_chunks: tuple = ()
    images_encoded: int = 0


@dataclass(frozen=True)
class Step:
    """One step (ns): its parts, its wall time, the device's idle in it and which side set it."""

    regime: str
    device_ns: float
    host_ns: float
    non_overlap_ns: float
    step_ns: float

    @property
    def device_idle_ns(self) -> float:
        return self.step_ns - self.device_ns

    @property
    def bound(self) -> str:
        """``host`` where the host side is the longer one, else ``device``."""
        return "host" if self.host_ns > self.device_ns else "device"


def _check(regime: str, *times: float) -> None:
    choice(REGIMES, regime, "scheduling regime")
    if any(not (t >= 0) for t in times):  # also rejects NaN
        raise UsageError(f"host, device and non-overlapping times must be >= 0, got {times}")


def step_time(device_ns: float, host_ns: float, regime: str = "async", non_overlap_ns: float = 0.0) -> Step:
    """The step's wall time (ns) under ``regime``: async ``max(device, host) + non_overlap``, sync
    ``device + host + non_overlap``."""
    _check(regime, device_ns, host_ns, non_overlap_ns)
    overlapped = max(device_ns, host_ns) if regime == "async" else device_ns + host_ns
    return Step(regime, float(device_ns), float(host_ns), float(non_overlap_ns), overlapped + non_overlap_ns)


def both_regimes(device_ns: float, host_ns: float, non_overlap_ns: float = 0.0) -> dict[str, Step]:
    """``{"async": Step, "sync": Step}``: the same parts under both regimes, side by side."""
    return {r: step_time(device_ns, host_ns, r, non_overlap_ns) for r in REGIMES}


def planned_ahead(regime: str) -> int:
    """Steps the host plans ahead of the device: 1 under async scheduling (step n+1 is planned
    while step n runs; the host waits only for step n-1's outputs), 0 under sync."""
    _check(regime)
    return 1 if regime == "async" else 0


def peak_tokens_per_s(step_ns: float, batch: int) -> float:
    """``vllm bench serve``'s peak output tok/s of a long steady run of ``batch`` requests decoding
    one token per ``step_ns``: its largest one-second bucket holds ``ceil(1 s / step)`` steps."""
    if not step_ns > 0 or batch < 1:
        raise UsageError(f"a peak needs a step > 0 ns and a batch >= 1, got {step_ns} and {batch}")
    return float(batch * math.ceil(1e9 / step_ns - 1e-9))
