"""``labkit bench ranges``: host time per step to build the batch's image ranges, per builder.

More: docs/reference.md, ``labkit.attn.bench_ranges``.
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import replace

from labkit.attn.bench_h2d import make_batch, run_step
from labkit.attn.prefix_ranges import make_strategy
from labkit.attn.range_builders import RANGE_BUILDERS, make_builder
from labkit.bench import Bench, add_run_options, positive_ints, report, resolve_run_options
from labkit.device import measured_source, resolve_device
from labkit.errors import UsageError, choice
from labkit.results import RANGES_STEP, RANGES_SWEEP
from labkit.timing import time_host

#: (builder, prefix-range strategy) pairs timed as a whole metadata path
PIPELINES = {"pr38794+per_step": ("pr38794", "per_step"), "v033+pinned": ("v033", "pinned"),
             "incremental+cached": ("incremental", "cached")}

_RATIOS = {"speedup_vs_v033": "v033", "speedup_vs_v033_pinned": "v033+pinned"}
_OVER = ("num_requests", "images_per_request", "layers")
#: the two results: each builder (then each pipeline) at one batch shape, and the builders over requests x
#: images per request; the ratios over vLLM 0.33's builder (builders) and its whole path (pipelines)
STEP = Bench(RANGES_STEP, knobs={"repeats": (3, 7)}, ratios=_RATIOS, ratio_over=_OVER,
             ratio_where={"speedup_vs_v033": {"kind": "builder"}, "speedup_vs_v033_pinned": {"kind": "pipeline"}},
             columns=("kind", "variant", "median_ns", "ns_per_image", "h2d_per_step", *_RATIOS))
SWEEP = Bench(RANGES_SWEEP, axes={"requests": ((1, 16, 128), (1, 4, 16, 64, 128, 256)),
                                  "images": ((1, 8, 32), (1, 4, 16, 32, 64))},
              knobs=STEP.knobs, ratios={"speedup_vs_v033": "v033"}, ratio_over=_OVER, columns=STEP.columns)


def measure_builder(name: str, requests: list, *, repeats: int = 5, warmup: int = 1) -> dict:
    """Host time per steady decode step (ns quantiles) of builder ``name`` on ``requests``."""
    builder = make_builder(name)
    builder.update(added=requests)  # requests joined before the measured steps
    timing = time_host(lambda: builder.build(requests), warmup=warmup, repeats=repeats)
    images = sum(len(r.mm_features) for r in requests)
    return {"kind": "builder", "variant": name, "num_requests": len(requests),
            "images_per_request": images // max(1, len(requests)), "images": images,
            **{k: timing.as_row()[k] for k in ("median_ns", "p20_ns", "p80_ns", "repeats")},
            "ns_per_image": timing.median_ns / images if images else None}


def measure_pipeline(name: str, requests: list, layers: int, device: str, *, repeats: int = 5,
                     warmup: int = 1) -> dict:
    """Host time per step of a whole metadata path: build ranges, then the tensor for every layer."""
    builder_name, strategy_name = PIPELINES[name]
    builder = make_builder(builder_name)
    builder.update(added=requests)
    strategy = make_strategy(strategy_name, device, validate=False)
    num_seqs = len(requests)

    def step():
        run_step(strategy, builder.build(requests), num_seqs, layers)

    sync = None
    if str(device).startswith("cuda"):
        import torch

        sync = torch.cuda.synchronize
    timing = time_host(step, warmup=max(1, warmup), repeats=repeats, setup=sync)
    last = strategy.ledger.rows()[-1]
    images = sum(len(r.mm_features) for r in requests)
    return {"kind": "pipeline", "variant": name, "builder": builder_name, "strategy": strategy_name, "layers": layers,
            "num_requests": num_seqs, "images_per_request": images // max(1, num_seqs), "images": images,
            **{k: timing.as_row()[k] for k in ("median_ns", "p20_ns", "p80_ns", "repeats")},
            "h2d_per_step": last["h2d_count"], "copy_target": last["target"]}


def step_bench(device: str, builders, *, num_requests=128, images=32, layers=34, variant="list",
               pipelines=tuple(PIPELINES)) -> Bench:
    """``ranges_step`` at one batch shape: each builder, then each pipeline (``.sweep(size)``: the rows)."""
    requests = make_batch(num_requests, images, variant)

    def measure(variant, repeats, **_):
        if variant in PIPELINES:
            return measure_pipeline(variant, requests, layers, device, repeats=repeats)
        return measure_builder(variant, requests, repeats=repeats)

    return replace(STEP, line_vals=[*builders, *pipelines], measure=measure)


def sweep_bench(builders, variant: str = "list") -> Bench:
    """``ranges_sweep``: each builder over requests x images per request (``.sweep(size)``: the rows)."""
    batch = functools.lru_cache(maxsize=None)(lambda n, m: make_batch(n, m, variant))
    return replace(SWEEP, line_vals=list(builders), measure=lambda variant, requests, images, repeats:
                   measure_builder(variant, batch(requests, images), repeats=repeats))


def run_benchmarks(device: str = "cpu", size: str = "quick", *, builders=None, num_requests=128, images=32,
                   layers=34, sweep_requests=None, sweep_images=None, repeats=None, variant="list",
                   sweep=True, save=True) -> dict:
    """Run ``ranges_step`` (and ``ranges_sweep``); returns name -> BenchResult, saved unless ``save`` is False
    (each rewritten after every point while it runs, ``complete: false`` until it is whole)."""
    from labkit.mm.placeholder import PLACEHOLDER_VARIANTS
    builders = list(builders or RANGE_BUILDERS)
    unknown = [b for b in builders if b not in RANGE_BUILDERS]
    if unknown or not builders:
        raise UsageError(f"unknown builders {unknown}: choose from {', '.join(RANGE_BUILDERS)}")
    choice(PLACEHOLDER_VARIANTS, variant, "placeholder variant")
    if num_requests < 1 or images < 0 or layers < 1 or (repeats is not None and repeats < 1):
        raise UsageError("requests, layers and repeats must be >= 1, images >= 0")
    params = {"device": device, "builders": builders, "placeholder_variant": variant,
              "num_requests": num_requests, "images_per_request": images, "layers": layers,
              "pipelines": {k: list(v) for k, v in PIPELINES.items()},
              "copy_target": "cuda-h2d" if device == "cuda" else "cpu-equivalent"}
    mine = {"params": params, "source": measured_source(device)}
    step = step_bench(device, builders, num_requests=num_requests, images=images, layers=layers, variant=variant)
    results = {RANGES_STEP: replace(step, **mine).run(size, save=save, repeats=repeats)}
    if sweep:
        at = SWEEP.at(size, requests=sweep_requests, images=sweep_images, repeats=repeats)
        results[RANGES_SWEEP] = replace(sweep_bench(builders, variant), source=mine["source"], params={
            **params, "sweep_requests": list(at["requests"]), "sweep_images": list(at["images"])}).run(
            size, save=save, **at)
    return results


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda (for the pipelines' copies)")
    p.add_argument("--builders", default=",".join(RANGE_BUILDERS), help="comma-separated builders (default: all)")
    p.add_argument("--requests", type=int, default=128, help="requests in the step benchmark (default 128)")
    p.add_argument("--images", type=int, default=32, help="images per request (default 32)")
    p.add_argument("--layers", type=int, default=34, help="attention layers in the pipelines (default 34)")
    p.add_argument("--variant", default="list", help="placeholder variant: tensor, list (default) or fast")
    p.add_argument("--sweep-requests", type=positive_ints, default=None, help="request counts for the sweep")
    p.add_argument("--sweep-images", type=positive_ints, default=None, help="images per request for the sweep")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per point")
    p.add_argument("--no-sweep", action="store_true", help="skip the sweep")
    add_run_options(p)


def main(args: argparse.Namespace) -> int:
    size = resolve_run_options(args)
    device = resolve_device(args.device)
    builders = [b.strip() for b in args.builders.split(",") if b.strip()]
    results = run_benchmarks(device, size, builders=builders, num_requests=args.requests, images=args.images,
                             layers=args.layers, sweep_requests=args.sweep_requests, sweep_images=args.sweep_images,
                             repeats=args.repeats, variant=args.variant, sweep=not args.no_sweep,
                             save=not args.no_save)
    report(args, results, {RANGES_STEP: STEP.columns, RANGES_SWEEP: SWEEP.columns})
    return 0
