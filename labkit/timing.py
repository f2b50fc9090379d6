"""The one timing helper: warm-up, repeats, median and p20/p80.

Host code is timed with ``time.perf_counter_ns``; GPU work with CUDA events recorded on
the current stream (never a bare wall clock around asynchronous work). Each sample times
``number`` back-to-back calls and is divided by ``number`` so that sub-microsecond calls
are measurable; ``repeats`` samples give the quantiles.
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

#: the host clock every measurement in the lab reads (ns)
clock_ns = time.perf_counter_ns


class stopwatch:
    """``with stopwatch() as sw: ...``, then ``sw.ns`` (or ``sw.s``): the host time of the block on
    :data:`clock_ns`, for one-off measurements and wall times that :func:`time_host` does not repeat."""

    def __enter__(self) -> "stopwatch":
        self.ns, self._t0 = 0, clock_ns()
        return self

    def __exit__(self, *exc) -> None:
        self.ns = clock_ns() - self._t0

    @property
    def s(self) -> float:
        return self.ns / 1e9


@dataclass(frozen=True)
class Timing:
    """Per-call time quantiles in nanoseconds over ``repeats`` samples of ``number`` calls."""

    median_ns: float
    p20_ns: float
    p80_ns: float
    mean_ns: float
    min_ns: float
    repeats: int
    number: int
    method: str  # "perf_counter_ns" or "cuda_event"

    @property
    def median_us(self) -> float:
        return self.median_ns / 1e3

    @property
    def median_ms(self) -> float:
        return self.median_ns / 1e6

    def as_row(self) -> dict:
        """Flat fields for a results row (``median_ns``, ``p20_ns``, ``p80_ns``, ...)."""
        return asdict(self)


def quantile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` in [0, 1] of already sorted samples."""
    if not sorted_samples:
        raise ValueError("quantile of no samples")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    pos = (len(sorted_samples) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    frac = pos - lo
    return sorted_samples[lo] * (1.0 - frac) + sorted_samples[hi] * frac


def summarize(samples_ns: Sequence[float], *, number: int = 1, method: str = "perf_counter_ns") -> Timing:
    """Quantiles of per-sample times (each already divided by ``number``)."""
    s = sorted(float(x) for x in samples_ns)
    return Timing(
        median_ns=quantile(s, 0.5),
        p20_ns=quantile(s, 0.2),
        p80_ns=quantile(s, 0.8),
        mean_ns=sum(s) / len(s),
        min_ns=s[0],
        repeats=len(s),
        number=number,
        method=method,
    )


def _check(warmup: int, repeats: int, number: int) -> None:
    if warmup < 0 or repeats < 1 or number < 1:
        raise ValueError(f"need warmup >= 0, repeats >= 1, number >= 1 (got {warmup}, {repeats}, {number})")


def time_host(
    fn: Callable[[], object],
    *,
    warmup: int = 3,
    repeats: int = 20,
    number: int = 1,
    setup: Callable[[], object] | None = None,
) -> Timing:
    """Time host (CPU) code with ``perf_counter_ns``; ``setup`` runs untimed before each sample."""
    _check(warmup, repeats, number)
    for _ in range(warmup):
        if setup is not None:
            setup()
        for _ in range(number):
            fn()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        if setup is not None:
            setup()
        t0 = clock()
        for _ in range(number):
            fn()
        samples.append((clock() - t0) / number)
    return summarize(samples, number=number, method="perf_counter_ns")


def auto_number(fn: Callable[[], object], *, target_ns: float = 2e5, cap: int = 100_000) -> int:
    """Inner-loop count so one sample of a host function lasts about ``target_ns``."""
    t0 = time.perf_counter_ns()
    fn()
    one = max(time.perf_counter_ns() - t0, 1)
    return int(max(1, min(cap, target_ns // one)))


def time_cuda(
    fn: Callable[[], object],
    *,
    warmup: int = 5,
    repeats: int = 50,
    number: int = 1,
    setup: Callable[[], object] | None = None,
) -> Timing:
    """Time GPU work with CUDA events on the current stream (device time, not host time)."""
    import torch

    _check(warmup, repeats, number)
    for _ in range(warmup):
        if setup is not None:
            setup()
        for _ in range(number):
            fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e6 / number)  # ms -> ns
    return summarize(samples, number=number, method="cuda_event")


def time_fn(fn: Callable[[], object], device: str = "cpu", **kwargs) -> Timing:
    """``time_cuda`` for CUDA devices, ``time_host`` otherwise."""
    if str(device).startswith("cuda"):
        return time_cuda(fn, **kwargs)
    return time_host(fn, **kwargs)


@contextlib.contextmanager
def frozen_gc_heap():
    """Everything alive on entry collected and frozen out of the cyclic collector until exit, as
    vLLM's engine core does after start-up (``vllm.utils.gc_utils.freeze_gc_heap``), so the
    collections meanwhile walk only what is created inside. A heap the caller has frozen already
    is left alone."""
    if gc.get_freeze_count():
        yield
        return
    for generation in (0, 1, 2):
        gc.collect(generation)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


T = TypeVar("T")


def progress(iterable: Iterable[T], *, total: int | None = None, desc: str = "", force: bool = False) -> Iterator[T]:
    """Wrap ``iterable`` in a tqdm bar on stderr if stderr is a TTY (or ``force``)."""
    if force or sys.stderr.isatty():
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return iter(iterable)
        return iter(tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False))
    return iter(iterable)
