"""``labkit bench mm``: the scheduler half of the lab (#40143 and beyond), measured and saved.

Results (through the results store, under ``data/results/<machine>/``).

More: docs/reference.md, ``labkit.mm.bench``.
"""

from __future__ import annotations

import argparse
import logging

from labkit.cli import add_run_options, resolve_run_options
from labkit.errors import UsageError
from labkit.mm.measure import (AFTER, BEFORE, DEFAULT_COMBOS, measure_decode_grid, measure_placeholder_calls,
                               measure_workload, sweep_decode_steps)
from labkit.mm.placeholder import PLACEHOLDER_VARIANTS
from labkit.mm.scheduler import SCHEDULING_STRATEGIES
from labkit.mm.step_scheduler import SchedulerConfig
from labkit.mm.workload import WORKLOAD_PRESETS, get_workload_spec
from labkit.results import (MM_DECODE_STEP, MM_GET_NUM_EMBEDS, MM_SWEEP, MM_WORKLOAD, make_result, report_saved,
                            save_result, sized_name)

logger = logging.getLogger(__name__)

#: host timings are CPU measurements wherever they run (the machine block says which host)
SOURCE = "measured-cpu"


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", action="store_true", help="also sweep requests (1-256) and images per request (1-64)")
    p.add_argument("--requests", type=int, default=128, help="requests in the decode step (default 128)")
    p.add_argument("--images", type=int, default=32, help="images per request in the decode step (default 32)")
    p.add_argument("--workload", default=None, choices=sorted(WORKLOAD_PRESETS),
                   help="workload for the whole-scheduler run (default pr40143-short; quick: quick)")
    p.add_argument("--combos", default=None,
                   help="comma-separated VARIANT+STRATEGY pairs (default: " +
                        ",".join(f"{v}+{s}" for v, s in DEFAULT_COMBOS) + ")")
    add_run_options(p, json_help="also write all results as one JSON object (name -> result) to OUT",
                    size_help="quick (default: fewer repeats, smaller sweep and workload, seconds) or full")


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


def _fmt_ns(ns) -> str:
    if ns is None:
        return "-"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def _fmt_x(x) -> str:
    return "-" if x is None else f"{x:.1f}x"


def run_benchmarks(*, quick: bool = True, sweep: bool = False, num_requests: int = 128, images_per_request: int = 32,
                   workload: str | None = None, combos=None, save: bool = True) -> dict:
    """Run the scheduler benchmarks; returns name -> BenchResult (saved to the results store if ``save``).

    Keys are the base names (``mm_decode_step`` ...); quick results are saved as ``<name>_quick``.

    ``quick`` keeps the whole run to seconds on a 2-core CPU (fewer repeats, workload
    ``quick`` instead of ``pr40143-short``, a coarse sweep). ``combos`` are
    ``(variant, strategy)`` pairs (before and after #40143 always included).
    """
    if num_requests < 1 or images_per_request < 1:
        raise UsageError("the decode step needs >= 1 request and >= 1 image per request")
    combos = parse_combos(",".join(f"{v}+{s}" for v, s in combos) if combos else None)
    spec = get_workload_spec(workload or ("quick" if quick else "pr40143-short"))
    reps = 7 if quick else 15
    results = {}

    size = "quick" if quick else "full"

    def record(name, rows, params, source=SOURCE):
        # quick runs never overwrite full recordings: they are filed as <name>_quick
        res = make_result(sized_name(name, size), rows, params={"size": size, **params}, source=source, size=size)
        if save:
            save_result(res)
        results[name] = res

    calls = measure_placeholder_calls(repeats=10 if quick else 25)
    record(MM_GET_NUM_EMBEDS, calls, {"model": "gemma", "tokens_per_image": 256, "timed": "host"})
    decode = measure_decode_grid(num_requests, images_per_request, combos=combos, repeats=reps)
    record(MM_DECODE_STEP, decode, {"num_requests": num_requests, "images_per_request": images_per_request,
                                      "tokens_per_image": 256, "model": "gemma", "timed": "host"})
    if sweep:
        if quick:
            rows = sweep_decode_steps((1, 8, 64, 256), (1, 8, 64), combos=combos, repeats=3)
        else:
            rows = sweep_decode_steps(combos=combos)
        record(MM_SWEEP, rows, {"tokens_per_image": 256, "model": "gemma", "timed": "host",
                                  "fixed_requests": 128, "fixed_images": 32})
    config = SchedulerConfig()
    wl = measure_workload(spec, combos=combos, config=config, repeats=2 if quick else 3)
    record(MM_WORKLOAD, wl, {"workload": spec.name, "max_num_batched_tokens": config.max_num_batched_tokens,
                               "max_num_seqs": config.max_num_seqs, "timed": "host"})
    if not all(r["identical_decisions"] for r in wl):
        logger.warning("strategies made different decisions on %s", spec.name)
    return results


def _print_summary(results: dict) -> None:
    print("placeholder calls (per call):")
    for r in results[MM_GET_NUM_EMBEDS].rows:
        print(f"  {r['variant']:<7} {r['method']:<28} {_fmt_ns(r['median_ns']):>10}  "
              f"vs tensor {_fmt_x(r['speedup_vs_tensor']):>7}  vs list {_fmt_x(r['speedup_vs_list']):>6}")
    dec = results[MM_DECODE_STEP]
    print(f"decode step, encoder scheduling ({dec.params['num_requests']} requests x "
          f"{dec.params['images_per_request']} images):")
    for r in dec.rows:
        print(f"  {r['combo']:<14} {_fmt_ns(r['median_ns']):>10}  vs before {_fmt_x(r['speedup_vs_before']):>7}"
              f"  vs #40143 {_fmt_x(r['speedup_vs_pr']):>7}")
    if MM_SWEEP in results:
        print(f"sweep: {len(results[MM_SWEEP].rows)} points")
    wl = results[MM_WORKLOAD]
    print(f"whole scheduler over workload {wl.params['workload']!r}:")
    for r in wl.rows:
        print(f"  {r['combo']:<14} {r['steps']:>5} steps {_fmt_ns(r['median_ns']):>10}  decode step "
              f"{_fmt_ns(r['decode_step_median_ns']):>9}  vs #40143 {_fmt_x(r['speedup_vs_pr']):>6}"
              f"  identical={r['identical_decisions']}")


def main(args: argparse.Namespace) -> int:
    """Entry point for ``labkit bench mm``."""
    size = resolve_run_options(args)
    combos = parse_combos(args.combos)
    results = run_benchmarks(quick=size == "quick", sweep=args.sweep, num_requests=args.requests,
                             images_per_request=args.images, workload=args.workload, combos=combos,
                             save=not args.no_save)
    _print_summary(results)
    report_saved(results, args.json)
    return 0
