"""``labkit bench mm``: the scheduler half of the lab (#40143 and beyond), measured and saved.

More: docs/reference.md, ``labkit.mm.bench_mm``.
"""

from __future__ import annotations

import argparse
import logging

from labkit.bench import Bench, add_run_options, report, resolve_run_options
from labkit.errors import UsageError
from labkit.mm.measure import (AFTER, BEFORE, DEFAULT_COMBOS, measure_decode_grid, measure_placeholder_calls,
                               measure_workload, sweep_decode_steps)
from labkit.mm.placeholder import PLACEHOLDER_VARIANTS
from labkit.mm.scheduler import SCHEDULING_STRATEGIES
from labkit.mm.step_scheduler import SchedulerConfig
from labkit.mm.workload import WORKLOAD_PRESETS, get_workload_spec
from labkit.results import MM_DECODE_STEP, MM_GET_NUM_EMBEDS, MM_SWEEP, MM_WORKLOAD, save_result

logger = logging.getLogger(__name__)

_HOST = {"model": "gemma", "timed": "host"}
#: the four results; the sweep's axes and every repeat count at each size (quick keeps the run to seconds)
CALLS = Bench(MM_GET_NUM_EMBEDS, knobs={"repeats": (10, 25)}, params={**_HOST, "tokens_per_image": 256},
              columns=("variant", "method", "median_ns", "speedup_vs_tensor", "speedup_vs_list"))
DECODE = Bench(MM_DECODE_STEP, knobs={"repeats": (7, 15)}, params={**_HOST, "tokens_per_image": 256},
               columns=("combo", "num_requests", "images_per_request", "median_ns", "speedup_vs_before",
                        "speedup_vs_pr"))
SWEEP = Bench(MM_SWEEP, axes={"requests": ((1, 8, 64, 256), (1, 2, 4, 8, 16, 32, 64, 128, 256)),
                              "images": ((1, 8, 64), (1, 2, 4, 8, 16, 32, 64))}, knobs={"repeats": (3, 7)},
              params={**_HOST, "tokens_per_image": 256, "fixed_requests": 128, "fixed_images": 32},
              columns=("sweep", "combo", "num_requests", "images_per_request", "median_ns", "speedup_vs_pr"))
WORKLOAD = Bench(MM_WORKLOAD, knobs={"workload": ("quick", "pr40143-short"), "repeats": (2, 3)},
                 params={"timed": "host"}, columns=("combo", "steps", "median_ns", "decode_step_median_ns",
                                                    "speedup_vs_pr", "identical_decisions"))


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", action="store_true", help="also sweep requests (1-256) and images per request (1-64)")
    p.add_argument("--requests", type=int, default=128, help="requests in the decode step (default 128)")
    p.add_argument("--images", type=int, default=32, help="images per request in the decode step (default 32)")
    p.add_argument("--workload", default=None, choices=sorted(WORKLOAD_PRESETS),
                   help="workload for the whole-scheduler run (default pr40143-short; quick: quick)")
    p.add_argument("--combos", default=None,
                   help="comma-separated VARIANT+STRATEGY pairs (default: " +
                        ",".join(f"{v}+{s}" for v, s in DEFAULT_COMBOS) + ")")
    add_run_options(p, size_help="quick (default: fewer repeats, smaller sweep and workload, seconds) or full")


def parse_combos(text: str | None) -> list[tuple[str, str]]:
    """``"list+loop,fast+cursor"`` -> pairs; UsageError on unknown names. Before/after are always included."""
    if not text:
        return list(DEFAULT_COMBOS)
    combos = []
    for item in text.split(","):
        parts = item.strip().split("+")
        if len(parts) != 2 or parts[0] not in PLACEHOLDER_VARIANTS or parts[1] not in SCHEDULING_STRATEGIES:
            raise UsageError(f"bad combo {item!r}: use VARIANT+STRATEGY with VARIANT in "
                             f"{'/'.join(PLACEHOLDER_VARIANTS)} and STRATEGY in {'/'.join(SCHEDULING_STRATEGIES)}")
        combos.append((parts[0], parts[1]))
    for need in (AFTER, BEFORE):
        if need not in combos:
            combos.insert(0, need)
    return combos


def run_benchmarks(size: str = "quick", *, sweep: bool = False, num_requests: int = 128, images_per_request: int = 32,
                   workload: str | None = None, combos=None, save: bool = True) -> dict:
    """Run the scheduler benchmarks; returns name -> BenchResult (saved to the results store if ``save``;
    quick results as ``<name>_quick``). ``combos`` are ``(variant, strategy)`` pairs (before and after
    #40143 always included)."""
    if num_requests < 1 or images_per_request < 1:
        raise UsageError("the decode step needs >= 1 request and >= 1 image per request")
    combos = parse_combos(",".join(f"{v}+{s}" for v, s in combos) if combos else None)
    spec = get_workload_spec(workload or WORKLOAD.at(size)["workload"])
    config = SchedulerConfig()
    results = {
        MM_GET_NUM_EMBEDS: CALLS.result(measure_placeholder_calls(repeats=CALLS.at(size)["repeats"]), size),
        MM_DECODE_STEP: DECODE.result(measure_decode_grid(num_requests, images_per_request, combos=combos,
                                                          repeats=DECODE.at(size)["repeats"]), size,
                                      params={"num_requests": num_requests, "images_per_request": images_per_request})}
    if sweep:
        at = SWEEP.at(size)
        results[MM_SWEEP] = SWEEP.result(sweep_decode_steps(at["requests"], at["images"], combos=combos,
                                                            repeats=at["repeats"]), size)
    wl = measure_workload(spec, combos=combos, config=config, repeats=WORKLOAD.at(size)["repeats"])
    results[MM_WORKLOAD] = WORKLOAD.result(wl, size, params={
        "workload": spec.name, "max_num_batched_tokens": config.max_num_batched_tokens,
        "max_num_seqs": config.max_num_seqs})
    if not all(r["identical_decisions"] for r in wl):
        logger.warning("strategies made different decisions on %s", spec.name)
    if save:
        for res in results.values():
            save_result(res)
    return results


def main(args: argparse.Namespace) -> int:
    """Entry point for ``labkit bench mm``."""
    size = resolve_run_options(args)
    results = run_benchmarks(size, sweep=args.sweep, num_requests=args.requests, images_per_request=args.images,
                             workload=args.workload, combos=parse_combos(args.combos), save=not args.no_save)
    report(args, results, {b.name: b.columns for b in (CALLS, DECODE, SWEEP, WORKLOAD)})
    return 0
