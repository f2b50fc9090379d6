"""``labkit bench h2d``: host time and H2D copies per step of each prefix-range strategy.

More: docs/reference.md, ``labkit.attn.bench_h2d``.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from labkit.attn.ledger import count_h2d_in_profile, gpu_stream_busy_idle
from labkit.attn.prefix_ranges import PREFIX_RANGE_STRATEGIES, make_strategy, ranges_for_batch
from labkit.bench import Bench, add_run_options, positive_ints, report, resolve_run_options
from labkit.device import measured_source, resolve_device
from labkit.errors import UsageError
from labkit.fileio import atomic_target
from labkit.results import H2D_GPU_IDLE, H2D_STEP, H2D_SWEEP
from labkit.timing import time_cuda, time_host

#: Gemma 3 decoder layer counts (every layer is a Triton attention layer reading the tensor)
LAYER_PRESETS = {"gemma-3-4b": 34, "gemma-3-12b": 48, "gemma-3-27b": 62}
MODEL_FOR_LAYERS = {v: k for k, v in LAYER_PRESETS.items()}

_COLUMNS = ("variant", "num_seqs", "layers", "model", "median_ns", "h2d_per_step", "speedup_vs_per_layer")
#: the three results: their axes (layer counts, sweep sequences) and repeats at each size; every
#: strategy at each point, the ratios over ``per_layer``
STEP = Bench(H2D_STEP, axes={"layers": ((34, 62), (34, 48, 62))}, knobs={"repeats": (5, 15)},
             ratios={"speedup_vs_per_layer": "per_layer"}, ratio_over=("num_seqs", "layers"), columns=_COLUMNS)
SWEEP = Bench(H2D_SWEEP, axes={"seqs": ((1, 8, 32, 128), (1, 4, 16, 64, 128, 256)), "layers": ((34,), (34, 62))},
              ratios={"speedup_vs_per_layer": "per_layer"}, ratio_over=("num_seqs", "layers"), columns=_COLUMNS)
IDLE = Bench(H2D_GPU_IDLE, axes=STEP.axes, ratios={"step_speedup_vs_per_layer": "per_layer"}, ratio_over=("layers",),
             value="step_median_ns", columns=("variant", "layers", "step_median_ns", "idle_us_per_step",
                                              "idle_fraction", "profile_pageable", "ledger_pageable", "counts_match"))


def _point(name: str, num_seqs: int, ranges, layers: int) -> dict:
    """The columns that name one benchmark point (strategy, batch shape, layer count, model)."""
    return {"variant": name, "num_seqs": num_seqs, "images_per_seq": max((len(r) for r in ranges), default=0),
            "layers": layers, "model": MODEL_FOR_LAYERS.get(layers)}


def make_batch(num_requests: int, images: int, variant: str = "list") -> list:
    """``num_requests`` Gemma-layout requests with ``images`` images each (``pr40143`` workload)."""
    from labkit.mm.workload import get_workload_spec, make_requests

    if num_requests < 1 or images < 0:
        raise UsageError(f"need requests >= 1 and images >= 0 (got {num_requests}, {images})")
    spec = get_workload_spec("pr40143").with_(num_requests=num_requests, images_per_request=images)
    return make_requests(spec, variant=variant)


def make_batch_ranges(num_seqs: int, images_per_seq: int) -> list[list[tuple[int, int]]]:
    """Image ranges per batch row for ``num_seqs`` Gemma-layout requests with ``images_per_seq`` images."""
    return ranges_for_batch(make_batch(num_seqs, images_per_seq, "fast"))


def _fresh(ranges):
    # new lists of new tuples, as vLLM's runner rebuilds them every step
    return [[(s, e) for s, e in row] for row in ranges]


def run_step(strategy, ranges, num_seqs: int, layers: int, read=None) -> None:
    """One step: ``begin_step``, each layer reads the tensor (``read(t)`` if given), ``end_step``."""
    strategy.begin_step(ranges, num_seqs)
    for layer in range(layers):
        t = strategy.tensor_for_layer(layer)
        if read is not None:
            read(t)
    strategy.end_step()


def measure_host(name: str, ranges, layers: int, device: str, *, repeats: int = 10, warmup: int = 2,
                 fresh_ranges: bool = True) -> dict:
    """Host time per step (ns quantiles) and per-step ledger counts of strategy ``name`` in steady decode.

    ``fresh_ranges`` rebuilds the range lists (untimed) before each step, as vLLM does, so
    the ``cached`` strategy pays for comparing new objects.
    """
    num_seqs = len(ranges)
    strategy = make_strategy(name, device, validate=False)
    is_cuda = str(device).startswith("cuda")
    state = {"r": ranges}

    def setup():
        if fresh_ranges:
            state["r"] = _fresh(ranges)
        if is_cuda:
            torch.cuda.synchronize()

    # at least one untimed step, so the ledger's last step is a steady-state one
    timing = time_host(lambda: run_step(strategy, state["r"], num_seqs, layers), warmup=max(1, warmup),
                       repeats=repeats, setup=setup)
    last = strategy.ledger.rows()[-1]  # a steady-state step
    return {**_point(name, num_seqs, ranges, layers),
            **{k: timing.as_row()[k] for k in ("median_ns", "p20_ns", "p80_ns", "repeats")},
            "h2d_per_step": last["h2d_count"], "h2d_bytes_per_step": last["h2d_bytes"],
            "pageable_per_step": last["pageable_count"], "pinned_per_step": last["pinned_count"],
            "sync_per_step": last["sync_count"], "copy_target": last["target"]}


# -- GPU idle ------------------------------------------------------------------------------

def measure_gpu_idle(name: str, ranges, layers: int, *, layer_mb: float = 256.0, hidden: int = 4096,
                     steps: int = 5, warmup: int = 2, trace_path: str | os.PathLike | None = None) -> dict:
    """Device idle time per step of strategy ``name`` on CUDA, from a torch.profiler trace.

    Each layer runs ``x @ w`` with ``layer_mb`` MiB of bf16 weights (memory-bound, like a
    decode layer) and one small kernel reading the prefix-range tensor; each step ends with
    a device synchronize (vLLM copies the sampled tokens to the host at the end of a step).
    Idle is the sum of gaps between GPU events on the busiest stream, divided by ``steps``,
    under the profiler (which adds some host overhead per copy); ``step_median_ns`` is the
    step time without the profiler, from CUDA events.
    """
    from torch.profiler import ProfilerActivity, profile

    device = "cuda"
    num_seqs = len(ranges)
    cols = max(1, int(layer_mb * 2**20 / (2 * hidden)))
    x = torch.randn(num_seqs, hidden, device=device, dtype=torch.bfloat16)  # (S, hidden)
    w = torch.randn(hidden, cols, device=device, dtype=torch.bfloat16) / math.sqrt(hidden)  # (hidden, cols)
    acc = torch.zeros(1, dtype=torch.int32, device=device)
    strategy = make_strategy(name, device, validate=False)

    def read(t):
        torch.mm(x, w)  # (S, cols): the layer's work
        if t is not None:
            acc.add_(t.view(-1)[:1])  # a kernel that reads the prefix ranges

    state = {"r": ranges}

    def new_ranges():
        state["r"] = _fresh(ranges)  # rebuilt outside the measured region

    def one_step():
        run_step(strategy, state["r"], num_seqs, layers, read)
        # a decode step ends by copying the sampled tokens to the host: the GPU drains
        torch.cuda.synchronize()

    for _ in range(warmup):
        new_ranges()
        one_step()
    step_time = time_cuda(one_step, warmup=0, repeats=steps, setup=new_ranges)
    strategy.ledger.reset()
    pool = [_fresh(ranges) for _ in range(steps)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for r in pool:
            state["r"] = r
            one_step()
    tmp = None
    if trace_path is None:
        fd, tmp = tempfile.mkstemp(suffix=".pt.trace.json")
        os.close(fd)
        trace_path = tmp
    try:
        with atomic_target(trace_path) as part:  # a kept trace is never left half-written
            prof.export_chrome_trace(str(part))
        counts = count_h2d_in_profile(trace_path)
        streams = gpu_stream_busy_idle(trace_path)
    finally:
        if tmp:
            os.unlink(tmp)
    main = max(streams, key=lambda r: r["events"]) if streams else {"busy_us": 0.0, "idle_us": 0.0, "span_us": 0.0}
    totals = strategy.ledger.totals()
    return {
        **_point(name, num_seqs, ranges, layers),
        "layer_mb": layer_mb,
        "steps": steps,
        "step_median_ns": step_time.median_ns,
        "idle_us_per_step": main["idle_us"] / steps,
        "busy_us_per_step": main["busy_us"] / steps,
        "idle_fraction": main["idle_us"] / main["span_us"] if main["span_us"] else None,
        **{f"{src}_{kind}": got[f"{kind}_count"] for src, got in (("profile", counts), ("ledger", totals))
           for kind in ("pageable", "pinned")},
        "counts_match": (counts["pageable_count"], counts["pinned_count"])
        == (totals["pageable_count"], totals["pinned_count"]),
    }


def ledger_demo(device: str = "cpu", *, num_seqs: int = 4, images: int = 2, layers: int = 3,
                steps: int = 3) -> list[dict]:
    """Ledger rows (one per step) of every strategy over a few steady decode steps of a small batch."""
    ranges = make_batch_ranges(num_seqs, images)
    ranges[-1] = []  # one request without images: a trivial row
    rows = []
    for name in PREFIX_RANGE_STRATEGIES:
        strategy = make_strategy(name, device)
        for _ in range(steps):
            run_step(strategy, ranges, num_seqs, layers)
        rows += strategy.ledger.rows()
    return rows


def run_benchmarks(device: str = "cpu", size: str = "quick", *, strategies=None, num_seqs: int = 128,
                   images: int = 32, layers=None, sweep_seqs=None, sweep_layers=None, repeats=None,
                   sweep: bool = True, gpu_idle: bool | None = None, layer_mb: float = 256.0,
                   trace_dir: str | None = None, save: bool = True) -> dict:
    """Run the step benchmark, the sweep and (on CUDA) the idle profile; returns name -> BenchResult.

    Results are saved to the results store unless ``save`` is False, each rewritten after every point
    while it runs (``complete: false`` until it is whole).
    """
    strategies = list(strategies or PREFIX_RANGE_STRATEGIES)
    unknown = [s for s in strategies if s not in PREFIX_RANGE_STRATEGIES]
    if unknown or not strategies:
        raise UsageError(f"unknown strategies {unknown}: choose from {', '.join(PREFIX_RANGE_STRATEGIES)}")
    if num_seqs < 1 or images < 0 or (repeats is not None and repeats < 1) or layer_mb <= 0:
        raise UsageError("sequences and repeats must be >= 1, images >= 0, layer MiB > 0")
    if gpu_idle and device != "cuda":
        raise UsageError("the GPU idle profile needs a CUDA device")
    repeats = repeats or STEP.at(size)["repeats"]
    layers = STEP.at(size, layers=layers)["layers"]
    params = {"device": device, "strategies": strategies, "num_seqs": num_seqs, "images_per_seq": images,
              "layer_presets": LAYER_PRESETS, "copy_target": "cuda-h2d" if device == "cuda" else "cpu-equivalent"}
    spec = functools.partial(replace, line_vals=strategies, source=measured_source(device))
    ranges = functools.lru_cache(maxsize=None)(lambda n: make_batch_ranges(n, images))

    def host(variant, layers, seqs=num_seqs, reps=repeats, **_):
        return measure_host(variant, ranges(seqs), layers, device, repeats=reps)

    results = {H2D_STEP: spec(STEP, measure=host, params={**params, "layers": list(layers)}).run(
        size, save=save, layers=layers)}
    if sweep:
        at = SWEEP.at(size, seqs=sweep_seqs, layers=sweep_layers)
        results[H2D_SWEEP] = spec(SWEEP, measure=functools.partial(host, reps=max(3, repeats // 2)), params={
            **params, "sweep_seqs": list(at["seqs"]), "sweep_layers": list(at["layers"])}).run(size, save=save, **at)
    if device == "cuda" and gpu_idle is not False:
        def idle(variant, layers, **_):
            path = None
            if trace_dir:
                Path(trace_dir).mkdir(parents=True, exist_ok=True)
                path = Path(trace_dir) / f"h2d-{variant}-S{num_seqs}-L{layers}.pt.trace.json.gz"
            return measure_gpu_idle(variant, ranges(num_seqs), layers, layer_mb=layer_mb, trace_path=path)

        results[H2D_GPU_IDLE] = spec(IDLE, measure=idle, params={**params, "layers": list(layers), "layer_mb": layer_mb}
                                     ).run(size, save=save, layers=layers)
    return results


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    p.add_argument("--strategies", default=",".join(PREFIX_RANGE_STRATEGIES),
                   help="comma-separated strategies (default: all)")
    p.add_argument("--seqs", type=int, default=128, help="sequences in the step benchmark (default 128)")
    p.add_argument("--images", type=int, default=32, help="images per sequence (default 32)")
    p.add_argument("--layers", type=positive_ints, default=None, help="layer counts for the step benchmark")
    p.add_argument("--sweep-seqs", type=positive_ints, default=None, help="sequence counts for the sweep")
    p.add_argument("--sweep-layers", type=positive_ints, default=None, help="layer counts for the sweep")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per point")
    p.add_argument("--no-sweep", action="store_true", help="skip the sweep")
    p.add_argument("--gpu-idle", choices=("auto", "on", "off"), default="auto",
                   help="profile device idle time (auto: when on CUDA)")
    p.add_argument("--layer-mb", type=float, default=256.0, help="weights per layer in the GPU loop, MiB")
    p.add_argument("--trace-dir", default=None, help="keep the GPU profiler traces here")
    add_run_options(p)


def main(args: argparse.Namespace) -> int:
    size = resolve_run_options(args)
    device = resolve_device(args.device)
    if args.gpu_idle == "on" and device != "cuda":
        raise UsageError("--gpu-idle on needs a CUDA device")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    results = run_benchmarks(
        device, size, strategies=strategies, num_seqs=args.seqs, images=args.images, layers=args.layers,
        sweep_seqs=args.sweep_seqs, sweep_layers=args.sweep_layers, repeats=args.repeats,
        sweep=not args.no_sweep, gpu_idle={"auto": None, "on": True, "off": False}[args.gpu_idle],
        layer_mb=args.layer_mb, trace_dir=args.trace_dir, save=not args.no_save,
    )
    report(args, results, {b.name: b.columns for b in (STEP, SWEEP, IDLE)})
    return 0
