"""Each step's host time: the census's phases, with the scheduler's own calls as measured here.

The engine core's serial chain per step (:data:`labkit.serve.host.host_census.CORE_PHASES`):
``other``, ``prepare_inputs`` and ``sample`` from the census (the arm's variant, steps with the
forward off the host, at the number of requests in the step), and ``schedule`` and
``update_from_output`` from the real scheduler's calls in this run (``scheduler="measured"``,
the default: the census holds decode steps only, while this run's scheduler plans every step of
the run, prefill included, with the arm's own code) or from the census too
(``scheduler="census"``). Everything is scaled by the CPU-speed factor. The API server's output
job per step is the census's ``process_outputs`` at the number of requests with outputs.

With ``server`` (:class:`~labkit.serve.host.server_host.ServerHost`, the real server's per-step
host measured beside the step) the core's chain gains ``io_threads`` (its output and input
threads, which hold the same interpreter lock), and the API server's output job becomes the
measured output processor plus, per request, its stream's chunk (:meth:`stream_ns_per_request`,
merged across steps when the API server is behind).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import UsageError
from labkit.serve.clock import StepRecord
from labkit.serve.host.host_census import CensusHost
from labkit.serve.host.server_host import ServerHost

__all__ = ["SCHEDULER_SOURCES", "ServeHost"]

SCHEDULER_SOURCES = ("measured", "census")
_MEASURED = ("schedule", "update_from_output")


@dataclass(frozen=True)
class ServeHost:
    """Host model of one arm (see the module text); ``census.cpu_speed`` scales the census (the
    census machine -> the GPU node's host) and ``cpu_speed`` the calls measured here (this
    machine -> the GPU node's host)."""

    census: CensusHost
    cpu_speed: float
    scheduler: str = "measured"
    server: ServerHost | None = None
    #: host ns per request per step added to the core's chain (``fitted_host``; ``--fit host-per-request``)
    extra_ns_per_request: float = 0.0

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULER_SOURCES:
            raise UsageError(f"scheduler host cost must be one of {', '.join(SCHEDULER_SOURCES)}")

    def core_ns(self, rec: StepRecord) -> dict:
        n = max(1, rec.shape.num_requests)
        out = {p: self.census.phase_ns(p, n) for p in ("other", "prepare_inputs", "sample")}
        for p in _MEASURED:
            if self.scheduler == "measured":
                out[p] = float(rec.measured_ns.get(p, 0.0)) * self.cpu_speed
            else:
                out[p] = self.census.phase_ns(p, n)
        if self.server is not None:
            out["io_threads"] = self.server.io_threads_ns(n)
        if self.extra_ns_per_request:
            out["fitted_host"] = self.extra_ns_per_request * rec.shape.num_requests
        return out

    def frontend_ns(self, outputs: int) -> float:
        """The API server's per-step part of a step's outputs (the output processor)."""
        if self.server is not None:
            return self.server.output_processor_ns(max(1, outputs))
        return self.census.phase_ns("process_outputs", max(1, outputs))

    def stream_ns_per_request(self, outputs: int) -> float:
        """Each stream's chunk (0 without the measured server host)."""
        return self.server.stream_ns_per_request(max(1, outputs)) if self.server is not None else 0.0
