"""``labkit bench vllm-sched``: the census of vLLM's real scheduler step (result ``vllm_sched``).

More: docs/reference.md, ``labkit.vllm.census.sched_census``.
"""

from __future__ import annotations

import argparse

from labkit.bench import Bench, add_grid_options, add_run_options, format_table, grid_from_args, report, resolve_run_options
from labkit.errors import UsageError
from labkit.results import VLLM_SCHED

__all__ = ["SCHED", "sweep", "summary", "main"]

#: the result: requests x images per request and the timed decode steps at each size, and its table
SCHED = Bench(VLLM_SCHED, axes={"requests": ((32, 128), (32, 128, 256)), "images": ((8, 32), (8, 32, 64))},
              knobs={"steps": (10, 30)}, columns=("phase", "variant", "num_requests", "images", "median_ns",
                                                   "overhead_cut"))


def sweep(grid: dict, model_dir) -> list[dict]:
    """Rows of :func:`labkit.vllm.census.sched_census.measure_point` over the grid, with the
    multimodal overhead cut (``overhead_cut``: 1 - patched overhead / installed overhead)."""
    from labkit.timing import progress
    from labkit.vllm.census.sched_census import measure_point

    points = [(n, m) for n in grid["requests"] for m in grid["images"]]
    rows = []
    for n, m in progress(points, total=len(points), desc="vllm sched"):
        point = measure_point(model_dir, n, m, steps=grid["steps"])
        over = {r["variant"]: r["overhead_vs_text_ns"] for r in point if r["phase"] == "schedule"}
        for r in point:
            if r["phase"] == "schedule" and r["variant"] == "early_return" and over["installed"] > 0:
                r["overhead_cut"] = 1 - over["early_return"] / over["installed"]
        rows.extend(point)
    return rows


def summary(rows, device_step_ms: float | None = None) -> list[dict]:
    """One record per (machine, requests, images) from recorded ``vllm_sched`` rows (``schedule`` phase, ms).

    With ``device_step_ms``, also the step under the two bounds of ``expected_effect``.
    """
    from labkit.vllm.census.bench_vllm_prefix_ranges import expected_effect

    table: dict[tuple, dict] = {}
    for r in rows:
        if r.get("phase") != "schedule":
            continue
        key = (r.get("machine"), r["num_requests"], r["images"])
        rec = table.setdefault(key, {"machine": key[0], "num_requests": key[1], "images": key[2]})
        rec[f"{r['variant']}_ms"] = r["median_ns"] / 1e6
    out = []
    for rec in table.values():
        if not all(f"{v}_ms" in rec for v in ("text", "installed", "early_return")):
            continue
        rec["mm_overhead_ms"] = rec["installed_ms"] - rec["text_ms"]
        rec["mm_overhead_patched_ms"] = rec["early_return_ms"] - rec["text_ms"]
        rec["overhead_cut"] = (1 - rec["mm_overhead_patched_ms"] / rec["mm_overhead_ms"]
                               if rec["mm_overhead_ms"] > 0 else None)
        if device_step_ms is not None:
            eff = expected_effect(rec["installed_ms"], rec["early_return_ms"], device_step_ms)
            rec.update({k: v for k, v in eff.items() if k.startswith("step_ms_")})
        out.append(rec)
    return sorted(out, key=lambda d: (str(d["machine"]), d["num_requests"], d["images"]))


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_grid_options(p)
    add_run_options(p, size_help="quick (default: 2 x 2 grid; saved as vllm_sched_quick) or full (3 x 3)")
    p.add_argument("--steps", type=int, default=None, help="timed decode steps per variant (quick 10, full 30)")
    p.add_argument("--profile", action="store_true", help="print a cProfile of one installed 128 x 32 schedule()")


def main(args: argparse.Namespace) -> int:
    """Measure, print a table, save; returns the exit code."""
    from labkit.vllm.census.bench_vllm_prefix_ranges import vllm_version

    size = resolve_run_options(args)
    grid = grid_from_args(args, SCHED.at(size, steps=args.steps))
    if grid["steps"] < 1:
        raise UsageError("--steps must be >= 1")
    version = vllm_version()  # UsageError without vLLM
    from labkit.vllm.census.sched_census import profile_step, temporary_model_dir

    with temporary_model_dir() as model_dir:
        profile = None
        if args.profile:
            profile = profile_step(model_dir)
            print("cProfile, one installed schedule() at 128 requests x 32 images (decode):")
            print(format_table(profile))
        rows = sweep(grid, model_dir)
    params = {"vllm_version": version, "grid": {k: (list(v) if isinstance(v, tuple) else v) for k, v in grid.items()},
              "placeholder_len": 258, "model": "generated tiny Gemma-3 config, no weights",
              "patch": "patches/vllm-0.33.0-encoder-early-return.diff",
              "stubbed": "MultiModalBudget (encoder budget = cache = max(max_num_batched_tokens, 258))"}
    if profile is not None:
        params["profile_128x32"] = profile
    report(args, SCHED.result(rows, size, params=params), SCHED.columns)
    return 0
