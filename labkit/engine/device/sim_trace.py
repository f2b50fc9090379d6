"""Kineto (Chrome-trace JSON) export of a simulated device's timeline, and the capture of a run's steps.

More: docs/reference.md, ``labkit.engine.device.sim_trace``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from labkit.engine.device.devices import SimDevice
from labkit.trace.capture import torch_capture, write_trace

logger = logging.getLogger(__name__)

#: simulated ns are shifted by this many us so no timestamp is zero
BASE_US = 1_000_000.0
HOST_PID = 1
HOST_TID = 1


def _us(ns: int) -> float:
    # whole microseconds, like older Kineto: HTA rounds sub-us timestamps inward, which would
    # distort small gaps; rounding both ends the same way keeps back-to-back ops back to back
    return float(BASE_US + round(ns / 1e3))


def _dur_us(start_ns: int, end_ns: int) -> float:
    return _us(end_ns) - _us(start_ns)


def build_sim_trace(device: SimDevice, *, window: tuple[int, int] | None = None,
                    metadata: dict | None = None) -> dict:
    """The Kineto JSON object for ``device``'s recorded spans and ops.

    ``window=(start_ns, end_ns)`` keeps host spans that start inside it and the device ops
    launched by kept runtime calls (so a kernel launched in the last step is kept even when it
    runs past the window). ``metadata`` lands in the top-level ``labkit`` dict.
    """
    if not device.record:
        raise ValueError("the simulated device was not recording (SimDevice(record=True))")
    lo, hi = window if window is not None else (-(2**62), 2**62)
    host = [s for s in device.host_spans if lo <= s.start_ns < hi]
    kept_corr = {s.correlation for s in host if s.cat == "cuda_runtime" and s.correlation}
    ops = [o for o in device.device_ops if o.correlation in kept_corr]
    label = device.profile.label()
    gpu, stream = device.device_index, device.stream
    events: list[dict] = [{"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args} for name, pid, tid, args in (
        ("process_name", HOST_PID, 0, {"name": "labkit engine host (simulated)"}),
        ("process_labels", HOST_PID, 0, {"labels": "CPU"}),
        ("thread_name", HOST_PID, HOST_TID, {"name": "engine thread (simulated host time)"}),
        ("process_name", gpu, 0, {"name": f"GPU {gpu} (simulated)"}),
        ("process_labels", gpu, 0, {"labels": f"GPU {gpu} (simulated, {label})"}),
        ("thread_name", gpu, stream, {"name": f"stream {stream} (simulated)"}))]
    ext = 0
    for s in host:
        ext += 1
        args: dict = {"External id": ext}
        if s.cat == "cuda_runtime":
            args["correlation"] = s.correlation
            args["cbid"] = 0
        events.append({"ph": "X", "cat": s.cat, "name": s.name, "pid": HOST_PID, "tid": HOST_TID,
                       "ts": _us(s.start_ns), "dur": _dur_us(s.start_ns, s.end_ns), "args": args})
    launch_ts = {s.correlation: s.start_ns for s in host if s.cat == "cuda_runtime" and s.correlation}
    flowed: set[int] = set()
    for o in ops:
        args = {"device": device.device_index, "stream": device.stream, "correlation": o.correlation,
                "External id": o.correlation, "simulated": True}
        if o.kind == "kernel":
            args.update({"grid": [1, 1, 1], "block": [128, 1, 1], "registers per thread": 32,
                         "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 4.0,
                         "est. achieved occupancy %": 1})
        else:
            dur_us = (o.end_ns - o.start_ns) / 1e3
            args.update({"bytes": o.nbytes,
                         "memory bandwidth (GB/s)": round(o.nbytes / (dur_us * 1e3), 3) if dur_us > 0 else 0.0})
        events.append({"ph": "X", "cat": o.kind, "name": o.name, "pid": device.device_index,
                       "tid": device.stream, "ts": _us(o.start_ns), "dur": _dur_us(o.start_ns, o.end_ns),
                       "args": args})
        if o.correlation in flowed:
            continue  # a graph replay: one flow from its cudaGraphLaunch to its first kernel
        flowed.add(o.correlation)
        events.append({"ph": "s", "id": o.correlation, "pid": HOST_PID, "tid": HOST_TID,
                       "ts": _us(launch_ts[o.correlation]), "cat": "ac2g", "name": "ac2g"})
        events.append({"ph": "f", "id": o.correlation, "pid": device.device_index, "tid": device.stream,
                       "ts": _us(o.start_ns), "cat": "ac2g", "name": "ac2g", "bp": "e"})
    meta = {"source": "simulated", **device.profile.describe(), **(metadata or {})}
    meta["source"] = "simulated"
    props = {"id": gpu, "name": f"simulated ({label})", "totalGlobalMem": 0, "computeMajor": 0, "computeMinor": 0,
             "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
             "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
             "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448}
    return {"schemaVersion": 1, "deviceProperties": [props], "labkit": meta, "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 0, "traceEvents": events, "traceName": "labkit simulated engine"}


class SimCapture:
    """``torch_capture``'s schedule on a ``SimDevice``: ``warmup`` steps unrecorded, then ``active`` steps
    recorded in ``ProfilerStep#N`` spans (call ``step()`` after each); a clean exit writes ``path``."""

    def __init__(self, device: SimDevice, path: str | Path, *, metadata: dict | None = None, warmup: int = 1,
                 active: int = 3) -> None:
        self.device, self.path, self.metadata = device, Path(path), dict(metadata or {})
        self.warmup, self.active = warmup, active
        self._window: list[int] = []

    def __enter__(self):
        self.device.record = self.warmup == 0
        self.device.reset_records()
        self._step, self._start = 0, self.device.now_ns()
        self._window = [self._start] if self.warmup == 0 else []
        return self

    def step(self) -> None:
        now, n = self.device.now_ns(), self._step
        if self.warmup <= n < self.warmup + self.active:
            self.device.mark(f"ProfilerStep#{n}", self._start, now)
            self._window = [self._window[0] if self._window else self._start, now]
        self._step, self._start = n + 1, now
        if self._step == self.warmup:
            self.device.record = True
            self._window = [now]
        elif self._step >= self.warmup + self.active:
            self.device.record = False

    def __exit__(self, exc_type, *exc) -> None:
        self.device.record = True  # build_sim_trace checks the device has recorded
        try:
            if exc_type is None and len(self._window) == 2:
                write_trace(build_sim_trace(self.device, window=(self._window[0], self._window[1]),
                                            metadata=self.metadata), self.path)
            elif exc_type is None:
                logger.warning("no complete active profiler step: no trace written to %s", self.path)
        finally:
            self.device.record = False
            self.device.reset_records()


def device_capture(device, path: str | Path, *, metadata: dict | None = None, warmup: int = 1, active: int = 3):
    """A context manager capturing an engine run on ``device`` into ``path``: ``SimCapture`` or ``torch_capture``."""
    if getattr(device, "kind", None) == "sim":
        return SimCapture(device, path, metadata=metadata, warmup=warmup, active=active)
    return torch_capture(path, cuda=bool(getattr(device, "is_cuda", False)), metadata=metadata,
                         warmup=warmup, active=active)
