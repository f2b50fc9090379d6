"""The real device for the mini engine: torch ops on CUDA (asynchronously) or on the CPU (``SimDevice``'s interface)."""

from __future__ import annotations

from typing import Callable
from labkit.timing import clock_ns


class TorchDevice:
    """The real device: torch calls on ``cuda`` or ``cpu``; ``time_ops=True`` times each new op shape alone."""

    kind = "torch"

    def __init__(self, device: str = "cuda", *, time_ops: bool = False) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        self.source = "measured-gpu" if self.is_cuda else "measured-cpu"
        self.time_ops = bool(time_ops and self.is_cuda)
        self._op_events: list[tuple[str, int, int, object, object]] = []
        self._timed: set = set()
        self._t0 = clock_ns()

    def now_ns(self) -> int:
        """Host time (ns) since the device was created."""
        return clock_ns() - self._t0

    def launch(self, op: str, duration_ns: int | None = None, *, tokens: int = 0, kv_tokens: int = 0,
               fn: Callable[[], object] | None = None):
        """Run ``fn`` (which queues the real kernels) and return its result."""
        if fn is None:
            return None
        if self.time_ops and (op, tokens, kv_tokens) not in self._timed:
            self._time_op(op, tokens, kv_tokens, fn)
        return fn()

    #: calls per timed op; few enough that the launch queue never fills while the GPU sleeps
    TIMED_REPEATS = 5

    def _time_op(self, op, tokens, kv_tokens, fn) -> None:
        # Each op shape once: behind a short sleep kernel (so the calls are queued before the GPU
        # gets to them) run it TIMED_REPEATS times between two events: pure device time per call.
        # Repeating an op is harmless here (idempotent writes, in-place scaling by ones).
        torch = self.torch
        self._timed.add((op, tokens, kv_tokens))
        torch.cuda.synchronize(self.device)
        torch.cuda._sleep(5_000_000)  # a few ms of GPU time
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.TIMED_REPEATS):
            fn()
        end.record()
        self._op_events.append((op, tokens, kv_tokens, start, end))

    def begin_timing(self) -> None:
        """Time every op shape again from here on (``time_ops`` mode)."""
        self._timed = set()

    def copy_h2d(self, op: str, src=None, *, nbytes: int | None = None, pinned: bool = False,
                 non_blocking: bool = False):
        """Copy CPU tensor ``src`` to the device (through pinned memory when ``pinned``)."""
        if src is None:
            raise ValueError("TorchDevice.copy_h2d needs the source tensor")
        if pinned and self.is_cuda and not src.is_pinned():
            src = src.pin_memory()
        return src.to(self.device, non_blocking=non_blocking)

    def copy_d2h(self, op: str, src=None, *, nbytes: int | None = None, pinned: bool = True,
                 non_blocking: bool = True):
        """Copy device tensor ``src`` to the host (into pinned memory when ``pinned``)."""
        if src is None:
            raise ValueError("TorchDevice.copy_d2h needs the source tensor")
        if not self.is_cuda:
            return src.clone()
        dst = self.torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=pinned)
        dst.copy_(src, non_blocking=non_blocking)
        return dst

    def record_event(self):
        """A CUDA event recorded on the current stream (None on CPU)."""
        if not self.is_cuda:
            return None
        ev = self.torch.cuda.Event()
        ev.record()
        return ev

    def wait_event(self, event) -> None:
        """Block the host until ``event`` has completed."""
        if event is not None:
            event.synchronize()

    def synchronize(self) -> None:
        """Block the host until the device is idle."""
        if self.is_cuda:
            self.torch.cuda.synchronize(self.device)

    def produce(self, fn: Callable, arg, ledger):
        """Run ``fn(arg)``: its copies are real here (``ledger`` is only read by ``SimDevice``)."""
        return fn(arg)

    def annotate(self, name: str):
        """A ``torch.profiler.record_function`` range (cheap when no profiler is active)."""
        return self.torch.profiler.record_function(name)

    def op_times_ns(self) -> list[tuple[str, int, int, float]]:
        """``(op, tokens, kv_tokens, device_ns)`` for every timed launch (synchronises first)."""
        self.synchronize()
        n = self.TIMED_REPEATS
        out = [(op, t, kv, s.elapsed_time(e) * 1e6 / n) for op, t, kv, s, e in self._op_events]
        self._op_events.clear()
        return out
