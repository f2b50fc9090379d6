"""The one timing helper: warm-up, repeats, median and p20/p80; the two unit costs of a run.

Host code is timed with ``time.perf_counter_ns``; GPU work with CUDA events recorded on
the current stream (never a bare wall clock around asynchronous work). Each sample times
``number`` back-to-back calls and is divided by ``number`` so that sub-microsecond calls
are measurable; ``repeats`` samples give the quantiles.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

from labkit.errors import UsageError

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


def nearest_rank(sorted_samples: Sequence[float], q: float) -> float:
    """Nearest-rank quantile ``q`` in [0, 1] of already sorted samples (one of the samples, as a float)."""
    return float(sorted_samples[min(len(sorted_samples) - 1, int(round(q * (len(sorted_samples) - 1))))])


def summarize(samples_ns: Sequence[float], *, number: int = 1, method: str = "perf_counter_ns") -> Timing:
    """Quantiles of per-sample times (each already divided by ``number``)."""
    s = sorted(float(x) for x in samples_ns)
    return Timing(median_ns=quantile(s, 0.5), p20_ns=quantile(s, 0.2), p80_ns=quantile(s, 0.8), mean_ns=sum(s) / len(s),
                  min_ns=s[0], repeats=len(s), number=number, method=method)


def _check(warmup: int, repeats: int, number: int) -> None:
    if warmup < 0 or repeats < 1 or number < 1:
        raise ValueError(f"need warmup >= 0, repeats >= 1, number >= 1 (got {warmup}, {repeats}, {number})")


def time_host(fn: Callable[[], object], *, warmup: int = 3, repeats: int = 20, number: int = 1,
              setup: Callable[[], object] | None = None) -> Timing:
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


def time_cuda(fn: Callable[[], object], *, warmup: int = 5, repeats: int = 50, number: int = 1,
              setup: Callable[[], object] | None = None) -> Timing:
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


# -- the unit costs of a run: how fast this CPU runs now ----------------------------------------------

#: elements read per timed loop in the CPU part of ``labkit calibrate``
CPU_ELEMENTS = 1024
CPU_VARIANTS = ("loop_only", "list_index", "tensor_index_int", "tensor_index_item")
#: where a result keeps the unit costs measured in its own run (:func:`in_run_calibration`)
IN_RUN_KEY = "calibration_in_run"
#: the unit costs compared, and how far apart two runs' may be before a view says so
UNIT_COSTS, UNIT_COST_SPREAD = {"tensor_index_int": "one tensor read + int()", "loop_only": "one Python loop step"}, 1.2


def unit_row(kind: str, variant: str, metric: str, t: Timing, **extra) -> dict:
    return {"kind": kind, "variant": variant, "metric": metric, **extra,
            **{k: getattr(t, k) for k in ("median_ns", "p20_ns", "p80_ns", "repeats", "number")}}


def per_element(t: Timing, divisor: int) -> Timing:
    """Per-element quantiles from per-loop quantiles."""
    return replace(t, **{k: getattr(t, k) / divisor for k in ("median_ns", "p20_ns", "p80_ns", "mean_ns", "min_ns")})


def cpu_loops(n: int = CPU_ELEMENTS) -> dict:
    """The CPU part's timed loops by variant: each reads ``n`` elements (cumulative sums)."""
    import torch

    values = list(range(0, 4 * n, 4))                    # a cumsum-like list of ints
    tensor = torch.tensor(values, dtype=torch.int64)     # (n,) CPU tensor, as embeds_cumsum was
    idx = list(range(n))

    def loop_only():
        for i in idx:
            pass

    def list_index():
        for i in idx:
            values[i]

    def tensor_index_int():
        for i in idx:
            int(tensor[i])                               # 0-d tensor, then int()

    def tensor_index_item():
        for i in idx:
            tensor[i].item()

    return {f.__name__: f for f in (loop_only, list_index, tensor_index_int, tensor_index_item)}


def calibrate_cpu(*, n: int = CPU_ELEMENTS, repeats: int = 30, warmup: int = 3, variants=None) -> list[dict]:
    """Per-element host time (ns) of each CPU variant (``variants``: a subset of :data:`CPU_VARIANTS`);
    rows with ``kind="cpu"``."""
    loops = cpu_loops(n)
    unknown = sorted(set(variants or ()) - set(loops))
    if unknown:
        raise UsageError(f"unknown CPU calibration variants: {', '.join(unknown)}")
    rows = []
    for variant, fn in loops.items():
        if variants is not None and variant not in variants:
            continue
        t = per_element(time_host(fn, warmup=warmup, repeats=repeats), n)
        rows.append(unit_row("cpu", variant, "host_ns", t, elements=n))
    return rows


def in_run_calibration(repeats: int = 20) -> list[dict]:
    """The two unit costs (one tensor read + ``int()``, one Python loop iteration) measured now, in
    this process: what a result keeps under ``labkit.results.IN_RUN_KEY`` beside the host costs it measured."""
    return calibrate_cpu(repeats=repeats, variants=("tensor_index_int", "loop_only"))


def unit_costs(result) -> dict[str, float]:
    """``{variant: ns}`` of the unit costs ``result``'s own run measured (a calibration's own CPU rows; a
    census that measured them per point: their median); empty where the run kept none."""
    kept = result.params.get(IN_RUN_KEY) or result.rows  # a calibration's own rows are its unit costs
    if isinstance(kept, dict):
        kept = [row for rows in kept.values() for row in rows]
    by: dict[str, list[float]] = {}
    for row in kept:
        if row.get("variant") in UNIT_COSTS and row.get("kind", "cpu") == "cpu" and row.get("median_ns"):
            by.setdefault(row["variant"], []).append(float(row["median_ns"]))
    return {v: statistics.median(ns) for v, ns in by.items()}


def unit_cost_note(results: Iterable) -> str:
    """What a view that sets ``results``' times side by side says about their runs' speed: each unit cost
    that differs by more than ``UNIT_COST_SPREAD`` between two of them. Empty where they agree (or there is
    one result)."""
    results = list(results)
    if len(results) < 2:
        return ""
    costs = {f"{r.slug} {r.name}": unit_costs(r) for r in results}
    lines = []
    for variant, what in UNIT_COSTS.items():
        got = {k: c[variant] for k, c in costs.items() if variant in c}
        if len(got) > 1 and max(got.values()) > UNIT_COST_SPREAD * min(got.values()):
            lo, hi = min(got, key=got.get), max(got, key=got.get)
            lines.append(f"The runs set side by side ran at different speeds: {what} took {got[lo]:,.1f} ns in {lo}'s "
                         f"run and {got[hi]:,.1f} ns in {hi}'s ({got[hi] / got[lo]:.1f}x); host times differ by as "
                         "much before any change.")
    return "\n".join(lines)  # a run that kept none says so in the page's provenance (labkit.report.provenance)
