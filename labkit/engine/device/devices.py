"""Two devices behind one interface: real torch (CUDA streams, or CPU) and a simulated GPU stream.

More: docs/reference.md, ``labkit.engine.device.devices``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

from labkit.engine.device.profiles import DeviceProfile, parametric_profile
from labkit.engine.device.torch_device import TorchDevice  # noqa: F401  (re-exported: one place for both devices)
from labkit.timing import clock_ns

#: Kineto-style names of the copy kinds, keyed by (direction, pinned)
MEMCPY_NAMES = {
    ("h2d", False): "Memcpy HtoD (Pageable -> Device)",
    ("h2d", True): "Memcpy HtoD (Pinned -> Device)",
    ("d2h", False): "Memcpy DtoH (Device -> Pageable)",
    ("d2h", True): "Memcpy DtoH (Device -> Pinned)",
}


def FROZEN_CLOCK() -> int:  # noqa: N802 (a constant-like clock)
    """A host clock that never moves: the simulated host time is then only modelled costs."""
    return 0


#: the CUDA runtime call's own share of an op's host cost (ns): the rest of a profile's per-op
#: host cost is Python and torch dispatch BEFORE the call, and shows in traces as such (a bare
#: launch costs a few us; ``calibration`` measures it)
RUNTIME_CALL_NS = 5_000


def _rt_start(h: int, ret: int) -> int:
    return max(h, ret - RUNTIME_CALL_NS)


@dataclass(frozen=True)
class SimEvent:
    """A recorded CUDA-event stand-in: completes at simulated device time ``time_ns``."""

    time_ns: int


@dataclass(frozen=True)
class DeviceOp:
    """One op on the simulated stream: kind is ``kernel`` or ``gpu_memcpy`` (times in ns)."""

    name: str
    kind: str
    start_ns: int
    end_ns: int
    correlation: int
    nbytes: int = 0


@dataclass(frozen=True)
class HostSpan:
    """One host-side range: cat is ``user_annotation``, ``cpu_op`` or ``cuda_runtime`` (ns)."""

    name: str
    cat: str
    start_ns: int
    end_ns: int
    correlation: int = 0


class SimDevice:
    """Deterministic simulated GPU stream driven by real (or injected) host time.

    ``record=True`` keeps every host span and device op for trace export; timing is the same
    either way. ``stream`` and ``device_index`` only label the exported trace.
    """

    kind = "sim"
    source = "simulated"

    def __init__(self, profile: DeviceProfile | None = None, *, clock: Callable[[], int] = clock_ns,
                 record: bool = False, stream: int = 7, device_index: int = 0) -> None:
        self.profile = profile or parametric_profile()
        self.stream = stream
        self.device_index = device_index
        self.record = record
        self._clock = clock
        self._t0 = clock()
        self._offset = 0
        self._enter_real = 0
        self.tail_ns = 0  # when the stream has finished everything queued so far
        self.busy_ns = 0
        self.host_wait_ns = 0  # host time spent blocked in synchronising calls
        self.num_replays = 0  # CUDA-graph replays queued
        self.num_launches = 0  # host calls that queued device work (kernels, copies, replays)
        self.captured: dict[str, int] = {}  # graph name -> number of captured ops
        self.copy_prep_ns = 0  # modelled host work before each copy ``produce`` replays (fixed cost models)
        self.intervals: list[tuple[int, int]] = []  # device busy intervals in stream order
        self.host_spans: list[HostSpan] = []
        self.device_ops: list[DeviceOp] = []
        self._corr = 0
        self._open: list[tuple[str, int]] = []

    # -- host clock ---------------------------------------------------------------------------
    def now_ns(self) -> int:
        """Simulated host time (ns): real elapsed time plus modelled runtime costs and waits."""
        return self._clock() - self._t0 + self._offset

    def _enter(self) -> int:
        self._enter_real = self._clock()
        return self._enter_real - self._t0 + self._offset

    def _leave(self, host_ns: int) -> None:
        # the host resumes at host_ns: the bookkeeping time since _enter is not charged
        self._offset = host_ns - (self._clock() - self._t0)

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _enqueue(self, name: str, kind: str, ready_ns: int, dur_ns: int, corr: int, nbytes: int = 0) -> int:
        start = max(self.tail_ns, ready_ns)
        end = start + int(dur_ns)
        self.tail_ns = end
        self.busy_ns += end - start
        self.intervals.append((start, end))
        if self.record:
            self.device_ops.append(DeviceOp(name, kind, start, end, corr, nbytes))
        return end

    def _span(self, name: str, cat: str, start: int, end: int, corr: int = 0) -> None:
        if self.record:
            self.host_spans.append(HostSpan(name, cat, start, end, corr))

    # -- device API ---------------------------------------------------------------------------
    def launch(self, op: str, duration_ns: int | None = None, *, tokens: int = 0, kv_tokens: int = 0,
               fn: Callable[[], object] | None = None) -> None:
        """Queue kernel ``op`` for ``duration_ns`` or the profile's for the shape (``fn`` is ignored)."""
        h = self._enter()
        dur = duration_ns if duration_ns is not None else self.profile.duration_ns(op, tokens, kv_tokens)
        ret = h + int(self.profile.launch_overhead_ns)
        corr = self._next_corr()
        self.num_launches += 1
        self._enqueue(op, "kernel", ret, dur, corr)
        self._span(op, "cpu_op", h, ret)
        self._span("cudaLaunchKernel", "cuda_runtime", _rt_start(h, ret), ret, corr)
        self._leave(ret)

    def _copy(self, direction: str, op: str, nbytes: int, pinned: bool, non_blocking: bool) -> None:
        h = self._enter()
        p = self.profile
        cost = p.h2d_pageable if (direction == "h2d" and not pinned) else (
            p.h2d_pinned if direction == "h2d" else p.d2h_pinned)
        dur = cost.duration_ns(nbytes)
        ret = h + int(p.launch_overhead_ns)
        corr = self._next_corr()
        self.num_launches += 1
        end = self._enqueue(MEMCPY_NAMES[(direction, pinned)], "gpu_memcpy", ret, dur, corr, nbytes)
        if pinned and non_blocking:
            # truly asynchronous: the host only pays the call
            self._span(op, "cpu_op", h, ret)
            self._span("cudaMemcpyAsync", "cuda_runtime", _rt_start(h, ret), ret, corr)
            self._leave(ret)
        elif not pinned:
            # pageable: the driver syncs the stream first and the call returns when the copy is done
            self.host_wait_ns += end - ret
            self._span(op, "cpu_op", h, end)
            self._span("cudaMemcpyAsync", "cuda_runtime", _rt_start(h, ret), end, corr)
            self._leave(end)
        else:
            # pinned but blocking: async copy then a stream synchronize
            self.host_wait_ns += end - ret
            self._span(op, "cpu_op", h, end)
            self._span("cudaMemcpyAsync", "cuda_runtime", _rt_start(h, ret), ret, corr)
            self._span("cudaStreamSynchronize", "cuda_runtime", ret, end, self._next_corr())
            self._leave(end)

    def copy_h2d(self, op: str, src=None, *, nbytes: int | None = None, pinned: bool = False,
                 non_blocking: bool = False):
        """Host-to-device copy of ``nbytes`` (or of tensor ``src``); returns None (no real data)."""
        n = _nbytes(src, nbytes)
        self._copy("h2d", op, n, pinned, non_blocking)
        return None

    def copy_d2h(self, op: str, src=None, *, nbytes: int | None = None, pinned: bool = True,
                 non_blocking: bool = True):
        """Device-to-host copy of ``nbytes`` (or of tensor ``src``); returns None."""
        self._copy("d2h", op, _nbytes(src, nbytes), pinned, non_blocking)
        return None

    def replay(self, graph: str, ops) -> int:
        """Replay captured graph ``graph``: one host call, its ``ops`` queued back to back.

        ``ops``: ``(op, tokens, kv_tokens)`` per captured kernel, at this replay's (padded)
        shapes. The host pays ``profile.replay_overhead_ns`` once; the device runs the ops
        without gaps, so the replay's device time is the sum of their durations. Returns that
        sum (ns).
        """
        if graph not in self.captured:
            raise RuntimeError(f"graph {graph!r} replayed before it was captured")
        h = self._enter()
        ret = h + int(self.profile.replay_overhead_ns)
        corr = self._next_corr()
        total = 0
        for op, tokens, kv_tokens in ops:
            dur = self.profile.duration_ns(op, tokens, kv_tokens)
            self._enqueue(op, "kernel", ret, dur, corr)  # after the first, the stream is never free between ops
            total += dur
        self.num_replays += 1
        self.num_launches += 1
        self._span(f"cudagraph_replay:{graph}", "cpu_op", h, ret)
        self._span("cudaGraphLaunch", "cuda_runtime", _rt_start(h, ret), ret, corr)
        self._leave(ret)
        return total

    def capture(self, graph: str, ops) -> None:
        """Capture ``graph`` (``ops`` as for ``replay``): host time only, one launch cost per op."""
        h = self._enter()
        ret = h + int(self.profile.launch_overhead_ns) * len(ops) + int(self.profile.replay_overhead_ns)
        self.captured[graph] = len(ops)
        self._span(f"cudagraph_capture:{graph}", "cpu_op", h, ret)
        self._leave(ret)

    def spend(self, ns: float) -> None:
        """Advance the host by ``ns`` of modelled work (a fixed host cost model's charge)."""
        h = self._enter()
        self._leave(h + int(ns))

    def record_event(self) -> SimEvent:
        """Queue an event; it completes when everything queued before it has run."""
        h = self._enter()
        ret = h + int(self.profile.event_overhead_ns)
        self._span("cudaEventRecord", "cuda_runtime", h, ret, self._next_corr())
        self._leave(ret)
        return SimEvent(max(self.tail_ns, ret))

    def wait_event(self, event: SimEvent) -> None:
        """Block the host until ``event`` has completed."""
        h = self._enter()
        ret = max(h + int(self.profile.event_overhead_ns), event.time_ns)
        self.host_wait_ns += max(0, event.time_ns - h - int(self.profile.event_overhead_ns))
        self._span("cudaEventSynchronize", "cuda_runtime", h, ret, self._next_corr())
        self._leave(ret)

    def synchronize(self) -> None:
        """Block the host until the stream has drained."""
        h = self._enter()
        ret = max(h + int(self.profile.sync_overhead_ns), self.tail_ns)
        self.host_wait_ns += max(0, self.tail_ns - h - int(self.profile.sync_overhead_ns))
        self._span("cudaDeviceSynchronize", "cuda_runtime", h, ret, self._next_corr())
        self._leave(ret)

    def produce(self, fn: Callable, arg, ledger):
        """Run host code ``fn(arg)`` for real, then replay the copies it reported to ``ledger`` on the stream.

        The measured host time is split evenly before each copy, so a synchronising copy sees the queue
        as it would have.
        """
        steps = ledger.all_steps()
        before = len(steps[-1].copies) if steps else 0
        t0 = self._enter()
        self._leave(t0)
        out = fn(arg)
        t1 = self._enter()
        steps = ledger.all_steps()
        new = steps[-1].copies[before:] if steps else []
        if not new:
            self._leave(t1)
            return out
        self._leave(t0)  # rewind: the host time is re-spent between the replayed copies
        share = (t1 - t0) // len(new) + int(self.copy_prep_ns)
        for rec in new:
            self._leave(self.now_ns() + share)
            self._copy("h2d", f"h2d:{rec.what}", rec.nbytes, rec.pinned, not rec.synchronizing)
        return out

    @contextlib.contextmanager
    def annotate(self, name: str):
        """A named host range (``record_function`` equivalent) on the simulated host timeline."""
        start = self._enter()
        self._leave(start)
        try:
            yield
        finally:
            end = self._enter()
            self._span(name, "user_annotation", start, end)
            self._leave(end)

    def mark(self, name: str, start_ns: int, end_ns: int) -> None:
        """Record a finished host range (used for ``ProfilerStep#N`` spans)."""
        self._span(name, "user_annotation", start_ns, end_ns)

    # -- statistics ---------------------------------------------------------------------------
    def idle_between(self, start_ns: int, end_ns: int) -> int:
        """Device idle time (ns) inside the window ``[start_ns, end_ns)``."""
        return (end_ns - start_ns) - self.busy_between(start_ns, end_ns)

    def busy_between(self, start_ns: int, end_ns: int) -> int:
        """Device busy time (ns) inside the window ``[start_ns, end_ns)``."""
        busy = 0
        for s, e in self.intervals:
            lo, hi = max(s, start_ns), min(e, end_ns)
            if hi > lo:
                busy += hi - lo
        return busy

    def reset_records(self) -> None:
        """Forget recorded spans/ops (statistics and clocks keep running)."""
        self.host_spans.clear()
        self.device_ops.clear()


def _nbytes(src, nbytes: int | None) -> int:
    if nbytes is not None:
        return int(nbytes)
    if src is None:
        raise ValueError("a copy needs nbytes or a source tensor")
    return int(src.numel() * src.element_size())


def make_device(kind: str, *, profile: DeviceProfile | None = None, record: bool = False,
                time_ops: bool = False):
    """``"sim"`` -> ``SimDevice``; ``"cuda"``/``"cpu"`` -> ``TorchDevice``."""
    from labkit.errors import UsageError

    if kind == "sim":
        return SimDevice(profile, record=record)
    if kind in ("cuda", "cpu"):
        if kind == "cuda":
            from labkit.device import resolve_device

            resolve_device("cuda")  # one-line error if there is no GPU
        return TorchDevice(kind, time_ops=time_ops)
    raise UsageError(f"unknown engine device {kind!r}: use sim, cuda or cpu")
