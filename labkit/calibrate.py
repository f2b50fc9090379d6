"""Machine calibration: the unit costs the lab's two stories are made of.

CPU part (every machine): the #40143 unit cost, a Python list read vs a 1-D tensor read plus
``int()``, and, with Pillow, the image path's unit cost (``image_decode_resize``).
GPU part (CUDA only): the #38794 unit costs, a small H2D copy and a (nearly) empty kernel launch.

More: docs/reference.md, ``labkit.calibrate``.
"""

from __future__ import annotations

import argparse
import logging

from labkit.errors import UsageError
from labkit.bench import Bench, add_run_options, report, resolve_run_options
from labkit.results import CALIBRATION, PartialResult, save_result
from labkit.timing import CPU_ELEMENTS, Timing, calibrate_cpu, nearest_rank, time_cuda, time_host, unit_row

logger = logging.getLogger(__name__)

#: host-to-device copy sizes in bytes (256 B, 4 KiB, 1 MiB)
COPY_SIZES_BYTES = (256, 4096, 1 << 20)


def _empty_triton_kernel():
    """An empty Triton kernel, defined on first use (GPU only)."""
    import triton

    @triton.jit
    def _empty(x_ptr):  # x_ptr: unused pointer so the launch has one argument
        pass

    return _empty


def calibrate_gpu(*, sizes_bytes=COPY_SIZES_BYTES, repeats: int = 50, launches: int = 100,
                  on_rows=None) -> list[dict]:
    """H2D copy and kernel-launch costs on CUDA device 0; rows with ``kind="gpu"``.

    ``on_rows(rows)`` gets the rows so far after each copy size and each launch kind."""
    import torch

    if not torch.cuda.is_available():
        raise UsageError("the GPU calibration needs a CUDA GPU")
    dev = torch.device("cuda", 0)
    sync = torch.cuda.synchronize
    rows: list[dict] = []
    for nbytes in sizes_bytes:
        n = max(1, nbytes // 4)
        pageable = torch.ones(n, dtype=torch.float32)                 # (n,) pageable host memory
        pinned = torch.ones(n, dtype=torch.float32).pin_memory()      # (n,) page-locked host memory
        dst = torch.empty(n, dtype=torch.float32, device=dev)         # (n,) device buffer
        for variant, src, non_blocking in (("h2d_pageable", pageable, False), ("h2d_pinned", pinned, True)):
            def copy_and_sync(src=src, non_blocking=non_blocking):
                dst.copy_(src, non_blocking=non_blocking)
                sync()

            def copy(src=src, non_blocking=non_blocking):
                dst.copy_(src, non_blocking=non_blocking)

            host = time_host(copy_and_sync, warmup=5, repeats=repeats)
            span = time_cuda(copy, warmup=5, repeats=repeats)
            rows.append(unit_row("gpu", variant, "host_ns", host, size_bytes=n * 4))
            rows.append(unit_row("gpu", variant, "event_span_ns", span, size_bytes=n * 4))
            device = profiled_device_time(copy, calls=repeats, categories=("gpu_memcpy",))
            if device is not None:
                rows.append(unit_row("gpu", variant, "device_ns", device, size_bytes=n * 4))
        if on_rows:
            on_rows(rows)

    one = torch.zeros(1, device=dev)                                  # (1,) a one-element add is a real launch
    launchers = {"launch_torch_add1": lambda: one.add_(1.0)}
    try:
        kernel = _empty_triton_kernel()
        kernel[(1,)](one)
        sync()
        launchers["launch_triton_empty"] = lambda: kernel[(1,)](one)
    except Exception as exc:  # noqa: BLE001 - the torch launch still calibrates
        logger.warning("empty Triton kernel unavailable: %s", exc)
    for variant, fn in launchers.items():
        host = time_host(fn, warmup=3, repeats=repeats // 2 or 1, number=launches, setup=sync)
        sync()
        span = time_cuda(fn, warmup=3, repeats=repeats // 2 or 1, number=launches)
        rows.append(unit_row("gpu", variant, "host_ns", host))
        rows.append(unit_row("gpu", variant, "event_span_ns", span))
        device = profiled_device_time(fn, calls=launches, categories=("kernel",))
        if device is not None:
            rows.append(unit_row("gpu", variant, "device_ns", device))
        if on_rows:
            on_rows(rows)
    return rows


def device_durations_ns(trace: dict, categories: tuple[str, ...]) -> list[float]:
    """Durations (ns) of a Chrome trace's device activities in ``categories`` (e.g. ``kernel``)."""
    return [float(ev["dur"]) * 1e3 for ev in trace.get("traceEvents", [])  # Kineto writes microseconds
            if ev.get("ph") == "X" and ev.get("cat") in categories and "dur" in ev]


def timing_of(values_ns: list[float]) -> Timing | None:
    """Median and 20th/80th percentiles of ``values_ns`` as a ``Timing`` (None when empty)."""
    if not values_ns:
        return None
    v = sorted(values_ns)
    return Timing(median_ns=nearest_rank(v, 0.5), p20_ns=nearest_rank(v, 0.2), p80_ns=nearest_rank(v, 0.8),
                  mean_ns=sum(v) / len(v), min_ns=v[0],
                  repeats=len(v), number=1, method="profiler")


def profiled_device_time(fn, *, calls: int, categories: tuple[str, ...]) -> Timing | None:
    """Device time per activity of ``fn`` as the profiler reports it (None when it reports none).

    Runs ``fn`` ``calls`` times under ``torch.profiler`` (CPU + CUDA activities) and reads the
    durations of the device events of ``categories`` from the exported trace.
    """
    import json
    import tempfile
    from pathlib import Path

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "calibration.json"
            prof.export_chrome_trace(str(path))
            trace = json.loads(path.read_text(encoding="utf-8"))
    except (RuntimeError, OSError, ValueError) as exc:
        logger.warning("profiler device times unavailable: %s", exc)
        return None
    return timing_of(device_durations_ns(trace, categories))


def run_calibration(device: str = "auto", size: str = "quick", *, on_rows=None) -> tuple[list[dict], str]:
    """CPU rows always, GPU rows when ``device`` resolves to cuda; returns (rows, source).

    ``on_rows(rows)`` gets every row so far after each part (``labkit.results.PartialResult.update``)."""
    from labkit.device import measured_source, resolve_device

    kind = resolve_device(device)
    knobs = CALIBRATE.at(size)
    rows = calibrate_cpu(repeats=knobs["repeats"])
    if on_rows:
        on_rows(rows)
    if kind == "cuda":
        cpu = list(rows)
        rows = cpu + calibrate_gpu(repeats=knobs["gpu_repeats"],
                                   on_rows=(lambda gpu: on_rows(cpu + gpu)) if on_rows else None)
    return rows, measured_source(kind)


#: ``labkit calibrate``'s result: its own sweep (CPU loops, then the GPU's copies and launches)
CALIBRATE = Bench(CALIBRATION, knobs={"repeats": (15, 60), "gpu_repeats": (30, 100)}, columns=("kind", "variant", "metric", "size_bytes",
                                                                   "median_ns", "p20_ns", "p80_ns"),
                  params={"cpu_elements": CPU_ELEMENTS, "copy_sizes_bytes": list(COPY_SIZES_BYTES)})


def measure_and_save(device: str = "auto", size: str = "quick"):
    """Calibrate ``device`` at ``size`` and save the result (``calibration`` / ``calibration_quick``); returns it."""
    rows, source = run_calibration(device, size)
    result = CALIBRATE.result(rows, size, source=source)
    save_result(result)
    return result


def summary(rows: list[dict]) -> dict:
    """Headline ratios: tensor index + int() over list index (CPU), pageable over pinned (GPU)."""
    by = {(r["kind"], r["variant"], r["metric"], r.get("size_bytes")): r["median_ns"] for r in rows}
    out = {}
    lst = by.get(("cpu", "list_index", "host_ns", None))
    ten = by.get(("cpu", "tensor_index_int", "host_ns", None))
    if lst and ten:
        out["tensor_over_list"] = ten / lst
    for nbytes in COPY_SIZES_BYTES:
        pg = by.get(("gpu", "h2d_pageable", "host_ns", nbytes))
        pn = by.get(("gpu", "h2d_pinned", "host_ns", nbytes))
        if pg and pn:
            out[f"pageable_over_pinned_host_{nbytes}B"] = pg / pn
    return out


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    add_run_options(p, size_help="quick (default) or full (more repeats, tighter quantiles)")


def main(args: argparse.Namespace) -> int:
    """``labkit calibrate``: measure, print a table, save result ``calibration`` (quick: ``calibration_quick``)."""
    from labkit.device import measured_source, resolve_device

    size = resolve_run_options(args)
    draft = CALIBRATE.result([], size, source=measured_source(resolve_device(args.device)))
    partial = PartialResult(draft.name, params=draft.params, source=draft.source, size=size, save=not args.no_save)
    rows, source = run_calibration(args.device, size, on_rows=partial.update)
    report(args, CALIBRATE.result(rows, size, source=source), CALIBRATE.columns)
    for key, value in summary(rows).items():
        print(f"{key}: {value:.1f}x")
    return 0
