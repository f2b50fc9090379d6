"""The host a real server pays per step beside the census's step: from result ``vllm_serve_host``.

``labkit bench vllm-serve-host`` (:mod:`labkit.vllm.server.serve_host`) measured, per steady
decode step of a real ``vllm serve`` at a few numbers of streams:

- the engine core's I/O threads (``engine_output_thread``, ``engine_input_thread``): they hold
  the core's interpreter lock while they encode and decode, so here they join the engine core's
  serial chain as one more phase, ``io_threads``;
- the API server's work on one step's outputs (``api_server_outputs``), of which the output
  processor (``api_output_processor``: detokenizing; per step, it cannot merge) and the rest,
  every stream's chunk (response object, JSON, SSE line, HTTP write): per request, and merged
  when the API server is behind (vLLM's output handler drains every step's outputs waiting for
  it before the streams run, and each stream then sends what it has gathered in one chunk;
  :class:`~labkit.serve.api_server.ApiServer` with ``merge_outputs``).

Between two measured points a phase is linear in the number of requests; below the first and
above the last it is proportional to it (no fixed part is assumed). Every phase is scaled by the
CPU-speed factor of the machine that recorded it.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import UsageError
from labkit.serve.host.host_census import interpolate

__all__ = ["SERVER_PHASES", "ServerHost", "server_host_from_rows"]

SERVER_PHASES = ("engine_output_thread", "engine_input_thread", "api_server_outputs", "api_output_processor")


@dataclass(frozen=True)
class ServerHost:
    """Per phase ``[(requests, ns per step at cpu speed 1)]``, sorted; ``cpu_speed`` scales them."""

    points: dict
    cpu_speed: float = 1.0

    def phase_ns(self, phase: str, requests: int) -> float:
        pts = self.points[phase]
        n = float(requests)
        if n <= pts[0][0]:
            v = pts[0][1] * n / pts[0][0]
        elif n >= pts[-1][0]:
            v = pts[-1][1] * n / pts[-1][0]
        else:
            v = interpolate(pts, n)
        return max(0.0, v) * self.cpu_speed

    def io_threads_ns(self, requests: int) -> float:
        """The engine core's output and input threads in a step of ``requests`` outputs."""
        return self.phase_ns("engine_output_thread", requests) + self.phase_ns("engine_input_thread", requests)

    def output_processor_ns(self, requests: int) -> float:
        return self.phase_ns("api_output_processor", requests)

    def stream_ns_per_request(self, requests: int) -> float:
        """One stream's chunk: the API server's per-step work less the output processor, per request."""
        if requests <= 0:
            return 0.0
        rest = self.phase_ns("api_server_outputs", requests) - self.output_processor_ns(requests)
        return max(0.0, rest) / requests

    @property
    def requests_points(self) -> list[int]:
        return [int(n) for n, _ in self.points["api_server_outputs"]]


def server_host_from_rows(rows, *, cpu_speed: float = 1.0) -> ServerHost:
    """A :class:`ServerHost` from ``vllm_serve_host`` rows (``kind`` ``per_step``: ``requests``,
    ``phase``, ``median_ns``); ``UsageError`` when a phase is missing."""
    if not cpu_speed > 0:
        raise UsageError(f"the CPU-speed factor must be > 0, got {cpu_speed}")
    by: dict = {}
    for r in rows:
        if r.get("kind") != "per_step" or r.get("phase") not in SERVER_PHASES or r.get("median_ns") is None:
            continue
        if not r.get("requests") or r["requests"] < 1:
            continue
        by.setdefault(r["phase"], {})[int(r["requests"])] = float(r["median_ns"])
    missing = [p for p in SERVER_PHASES if p not in by]
    if missing:
        raise UsageError(f"the serve-host result has no {', '.join(missing)} rows")
    return ServerHost({p: sorted(by[p].items()) for p in SERVER_PHASES}, cpu_speed)
