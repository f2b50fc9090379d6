"""The host time of an engine step from the census of vLLM's step (result ``vllm_step``).

The census (:mod:`labkit.vllm.census.step_census`) timed vLLM's whole decode step per phase and A/B
variant at a few points (requests x images per request). Here one variant's phases at one
images-per-request value become functions of the number of requests in the step: linear
between the census's points, flat beyond the first and last. By default the rows are the
steps with the CPU build's forward taken off the host (``off_host:<phase>``): the host phases
as a GPU server's host pays them, without the CPU's own model evicting the caches between them.

Every phase is scaled by the CPU-speed factor (:mod:`labkit.serve.host.cpu_speed`). The census holds
decode steps only: a step carrying prefill is charged the decode step's phases at the same
number of requests (the input preparation of a prefill chunk grows with its tokens, not
modelled here), and the encoder's host side is taken as the census's (a few us: on a GPU the
encoder is device time).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from labkit.errors import UsageError

__all__ = ["PHASES", "CORE_PHASES", "CensusHost", "census_host_from_rows", "interpolate"]

#: the census phases a step pays on the host (``encoder`` folded into ``other``)
PHASES = ("other", "schedule", "prepare_inputs", "sample", "update_from_output", "process_outputs")
#: the engine core's serial phases (the frontend's ``process_outputs`` runs in the API server)
CORE_PHASES = PHASES[:-1]
OFF_HOST = "off_host:"


def interpolate(points: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear ``y(x)`` through ``points`` (sorted by x), flat outside them."""
    if not points:
        raise ValueError("no points to interpolate")
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return points[0][1]
    if x >= xs[-1]:
        return points[-1][1]
    i = bisect.bisect_right(xs, x)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class CensusHost:
    """One variant's host ns per phase as a function of requests in the step, scaled by ``cpu_speed``."""

    variant: str
    images: int
    points: dict  #: phase -> [(requests, ns at cpu speed 1)], sorted
    cpu_speed: float = 1.0
    forward: str = "off-host"

    def phase_ns(self, phase: str, requests: int) -> float:
        """Host ns of ``phase`` in a step of ``requests`` requests."""
        return interpolate(self.points[phase], requests) * self.cpu_speed

    def phases_ns(self, requests: int) -> dict:
        return {p: self.phase_ns(p, requests) for p in PHASES}

    @property
    def requests_points(self) -> list[int]:
        return [int(n) for n, _ in self.points["schedule"]]


def census_host_from_rows(rows, variant: str, *, images: int = 32, cpu_speed: float = 1.0,
                          forward: str = "off-host") -> CensusHost:
    """A :class:`CensusHost` from ``vllm_step`` rows (``variant``, ``num_requests``, ``images``,
    ``phase``, ``median_us``); ``forward``: ``off-host`` (rows ``off_host:<phase>``) or ``cpu``
    (the steps as measured). ``UsageError`` when the census has no such variant or phase."""
    if forward not in ("off-host", "cpu"):
        raise UsageError(f"forward must be off-host or cpu, got {forward!r}")
    if not cpu_speed > 0:
        raise UsageError(f"the CPU-speed factor must be > 0, got {cpu_speed}")
    prefix = OFF_HOST if forward == "off-host" else ""
    by_phase: dict = {}
    for r in rows:
        if r.get("variant") != variant or r.get("images") != images or r.get("median_us") is None:
            continue
        phase = str(r.get("phase", ""))
        if prefix and not phase.startswith(prefix):
            continue
        if not prefix and ":" in phase:
            continue
        name = phase[len(prefix):]
        name = "other" if name == "encoder" else name
        acc = by_phase.setdefault(name, {})
        acc[r["num_requests"]] = acc.get(r["num_requests"], 0.0) + float(r["median_us"]) * 1e3
    missing = [p for p in PHASES if p not in by_phase]
    if missing:
        have = sorted({r.get("variant") for r in rows if r.get("images") == images})
        raise UsageError(f"the census has no {variant} {forward} phases {', '.join(missing)} at {images} images "
                         f"per request (variants there: {', '.join(map(str, have)) or 'none'})")
    points = {p: sorted(by_phase[p].items()) for p in PHASES}
    return CensusHost(variant, images, points, cpu_speed, forward)
