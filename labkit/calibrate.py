"""Machine calibration: the unit costs the lab's two stories are made of.

CPU part (every machine), the #40143 unit cost: reading one element of a Python list
vs indexing a 1-D torch tensor (a 0-d tensor comes back) and converting it with
``int()``, per element, inside a Python loop (the loop alone is measured too).

GPU part (CUDA only), the #38794 unit costs: a small host-to-device copy from pageable
vs pinned memory (host wall time per copy including the synchronization a pageable
copy forces, and device time from CUDA events), and the launch of a (nearly) empty
kernel (host time to enqueue one, device time per launch back to back).

Rows are tidy: ``kind`` (cpu / gpu), ``variant``, ``metric`` (``host_ns`` or
``device_ns``), ``size_bytes`` for copies, ``median_ns``/``p20_ns``/``p80_ns``.
Saved as result ``calibration`` (source measured-cpu, or measured-gpu when the GPU
part ran). Needs only torch (and numpy); bounded to about 30 s on a GPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from labkit.errors import UsageError
from labkit.timing import Timing, time_cuda, time_host

logger = logging.getLogger(__name__)

RESULT_NAME = "calibration"
#: host-to-device copy sizes in bytes (256 B, 4 KiB, 1 MiB)
COPY_SIZES_BYTES = (256, 4096, 1 << 20)
#: elements read per timed loop in the CPU part
CPU_ELEMENTS = 1024

CPU_VARIANTS = ("loop_only", "list_index", "tensor_index_int", "tensor_index_item")


def _row(kind: str, variant: str, metric: str, t: Timing, **extra) -> dict:
    return {
        "kind": kind, "variant": variant, "metric": metric, **extra,
        "median_ns": t.median_ns, "p20_ns": t.p20_ns, "p80_ns": t.p80_ns,
        "repeats": t.repeats, "number": t.number,
    }


def _scaled(t: Timing, divisor: int) -> Timing:
    """Per-element quantiles from per-loop quantiles."""
    return Timing(
        median_ns=t.median_ns / divisor, p20_ns=t.p20_ns / divisor, p80_ns=t.p80_ns / divisor,
        mean_ns=t.mean_ns / divisor, min_ns=t.min_ns / divisor, repeats=t.repeats, number=t.number,
        method=t.method,
    )


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

    return {
        "loop_only": loop_only,
        "list_index": list_index,
        "tensor_index_int": tensor_index_int,
        "tensor_index_item": tensor_index_item,
    }


def calibrate_cpu(*, n: int = CPU_ELEMENTS, repeats: int = 30, warmup: int = 3) -> list[dict]:
    """Per-element host time (ns) of each CPU variant; rows with ``kind="cpu"``."""
    rows = []
    for variant, fn in cpu_loops(n).items():
        t = _scaled(time_host(fn, warmup=warmup, repeats=repeats), n)
        rows.append(_row("cpu", variant, "host_ns", t, elements=n))
    return rows


def _empty_triton_kernel():
    """An empty Triton kernel, defined on first use (GPU only)."""
    import triton

    @triton.jit
    def _empty(x_ptr):  # x_ptr: unused pointer so the launch has one argument
        pass

    return _empty


def calibrate_gpu(*, sizes_bytes=COPY_SIZES_BYTES, repeats: int = 50, launches: int = 100) -> list[dict]:
    """H2D copy and kernel-launch costs on CUDA device 0; rows with ``kind="gpu"``."""
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
            device = time_cuda(copy, warmup=5, repeats=repeats)
            rows.append(_row("gpu", variant, "host_ns", host, size_bytes=n * 4))
            rows.append(_row("gpu", variant, "device_ns", device, size_bytes=n * 4))

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
        device = time_cuda(fn, warmup=3, repeats=repeats // 2 or 1, number=launches)
        rows.append(_row("gpu", variant, "host_ns", host))
        rows.append(_row("gpu", variant, "device_ns", device))
    return rows


def run_calibration(device: str = "auto", *, quick: bool = True) -> tuple[list[dict], str]:
    """CPU rows always, GPU rows when ``device`` resolves to cuda; returns (rows, source)."""
    from labkit.device import measured_source, resolve_device

    kind = resolve_device(device)
    rows = calibrate_cpu(repeats=15 if quick else 60)
    if kind == "cuda":
        rows += calibrate_gpu(repeats=30 if quick else 100)
    return rows, measured_source(kind)


def make_calibration_result(rows: list[dict], source: str, *, full: bool = False):
    """The ``calibration`` result for ``rows`` (what the CLI and the notebook save)."""
    from labkit.results import make_result

    params = {"cpu_elements": CPU_ELEMENTS, "copy_sizes_bytes": list(COPY_SIZES_BYTES), "full": full}
    return make_result(RESULT_NAME, rows, source=source, params=params)


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


def format_table(rows: list[dict]) -> str:
    """A short fixed-width table of the rows (times in microseconds)."""
    lines = [f"{'kind':<4} {'variant':<20} {'metric':<9} {'bytes':>8} {'median_us':>10} {'p20_us':>9} {'p80_us':>9}"]
    for r in rows:
        size = r.get("size_bytes")
        lines.append(
            f"{r['kind']:<4} {r['variant']:<20} {r['metric']:<9} {'' if size is None else size:>8} "
            f"{r['median_ns'] / 1e3:>10.3f} {r['p20_ns'] / 1e3:>9.3f} {r['p80_ns'] / 1e3:>9.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``labkit calibrate``: measure, print a table, save result ``calibration``."""
    p = argparse.ArgumentParser(
        prog="labkit calibrate",
        description="Calibrate this machine: list vs tensor element reads (CPU); "
        "pageable vs pinned H2D copies and kernel launches (GPU).",
    )
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    p.add_argument("--full", action="store_true", help="more repeats (slower, tighter quantiles)")
    p.add_argument("--json", metavar="PATH", help="also write the result JSON here")
    p.add_argument("--no-save", action="store_true", help="do not write to the results store")
    args = p.parse_args(argv)
    if args.json and Path(args.json).is_dir():
        raise UsageError(f"--json {args.json} is a folder")

    from labkit.results import save_result

    rows, source = run_calibration(args.device, quick=not args.full)
    result = make_calibration_result(rows, source, full=args.full)
    print(format_table(rows))
    for key, value in summary(rows).items():
        print(f"{key}: {value:.1f}x")
    if not args.no_save:
        print(f"saved {save_result(result)}")
    if args.json:
        from labkit.fileio import write_atomic

        write_atomic(Path(args.json), json.dumps(result.to_json(), indent=1) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
