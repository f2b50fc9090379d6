"""The next host bubble: vLLM's per-step ``compute_mm_prefix_ranges``, as installed vs patched.

More: docs/reference.md, ``labkit.vllm.census.bench_vllm_prefix_ranges``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import logging
import pstats
import random
from collections import Counter
from pathlib import Path
from typing import Sequence

import torch

from labkit.bench import (Bench, add_grid_options, add_run_options, format_table, grid_from_args, report,
                          resolve_run_options)
from labkit.errors import UsageError
from labkit.results import RANGES_STEP, VLLM_PREFIX_RANGES, find_all, results_rows
from labkit.vllm.census.prefix_ranges_patch import (  # noqa: F401  (re-exported: the notebook and tests use them from here)
    CACHE_ATTR,
    GEMMA_PLACEHOLDER_LEN,
    SimpleFeature,
    cached_embeds_ranges,
    clear_cached_runs,
    gemma_mask,
    make_features,
    make_random_features,
    patched_placeholder,
    random_mask,
)

#: the result: installed and patched over requests x images at each size, the patched one's ``speedup``;
#: host (CPU) time, also on a GPU machine (the function never touches the device)
PREFIX = Bench(VLLM_PREFIX_RANGES, axes={"requests": ((1, 32, 128), (1, 8, 32, 128, 256)),
                                         "images": ((1, 8, 32), (1, 8, 32, 64))},
               line_vals=("installed", "patched"), knobs={"repeats": (7, 7), "checks": (60, 300)},
               measure=lambda variant, requests, images, repeats, **_: time_step(requests, images, repeats=repeats,
                                                                                 patched=variant == "patched"),
               ratios={"speedup": "installed"}, ratio_over=("num_requests", "images"),
               ratio_where={"speedup": {"variant": "patched"}},
               columns=("variant", "num_requests", "images", "median_ns", "speedup"))


# --------------------------------------------------------------------------------------
# vLLM side (imports inside functions)
# --------------------------------------------------------------------------------------


def vllm_version(venv: str = ".venv-vllm (bash scripts/test_vllm.sh sets it up)") -> str:
    """Installed vLLM version; ``UsageError`` naming ``venv`` to run in when vLLM is not importable."""
    try:
        import vllm
    except ImportError:
        raise UsageError(f"vLLM is not installed here: run this in {venv}") from None
    return vllm.__version__


def vllm_objects():
    """``(PlaceholderRange, MultiModalFeatureSpec, compute_mm_prefix_ranges)`` from the installed vLLM."""
    vllm_version()
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
    from vllm.v1.attention.backends.utils import compute_mm_prefix_ranges

    return PlaceholderRange, MultiModalFeatureSpec, compute_mm_prefix_ranges


def _vllm_feature(**kw):
    from vllm.multimodal.inputs import MultiModalFeatureSpec

    return MultiModalFeatureSpec(data=None, **kw)


_RANGE_KWARGS = (
    {},
    {"sliding_window": 100},
    {"sliding_window": 8},
    {"sliding_window": 8, "clamp_sliding_window": True},
    {"span_pad": 4},
)


def check_patch(cases: int = 300, seed: int = 0) -> int:
    """Compare installed and patched ``compute_mm_prefix_ranges`` on random inputs (value and type); returns the cases.

    ``AssertionError`` names the first mismatch.
    """
    placeholder, _, compute = vllm_objects()
    rng = random.Random(seed)
    for case in range(cases):
        state = rng.getstate()
        kwargs = _RANGE_KWARGS[case % len(_RANGE_KWARGS)]
        before = compute(make_random_features(rng, placeholder_cls=placeholder, feature_factory=_vllm_feature), **kwargs)
        rng.setstate(state)
        with patched_placeholder(placeholder):
            feats = make_random_features(rng, placeholder_cls=placeholder, feature_factory=_vllm_feature)
            cold = compute(feats, **kwargs)
            warm = compute(feats, **kwargs)
        for name, got in (("cold", cold), ("warm", warm)):
            if _typed(got) != _typed(before):
                raise AssertionError(f"case {case} ({name}, {kwargs}): patched {got} != installed {before}")
    return cases


def _typed(ranges: dict) -> list:
    return [(type(k), k, [(type(r), tuple(type(x) for x in r), r) for r in v]) for k, v in sorted(ranges.items())]


def time_step(num_requests: int, images: int, *, patched: bool, repeats: int = 7) -> dict:
    """Host time of one ``compute_mm_prefix_ranges`` call over ``num_requests`` x ``images`` (patched: steady state)."""
    from labkit.timing import auto_number, time_host

    placeholder, _, compute = vllm_objects()
    with patched_placeholder(placeholder) if patched else contextlib.nullcontext():
        feats = make_features(num_requests, images, placeholder_cls=placeholder, feature_factory=_vllm_feature)
        cold = None
        if patched:
            cold = time_host(lambda: compute(feats), warmup=0, repeats=3, setup=lambda: clear_cached_runs(feats))
        fn = lambda: compute(feats)  # noqa: E731
        number = auto_number(fn, target_ns=2e6, cap=1000)
        # a full collection before each sample keeps garbage-collector pauses of earlier
        # work out of the samples (vLLM freezes its long-lived objects out of the GC too)
        t = time_host(fn, warmup=1, repeats=repeats, number=number, setup=gc.collect)
    row = {"variant": "patched" if patched else "installed", "num_requests": num_requests, "images": images,
           "features": num_requests * images, **t.as_row(),
           "per_feature_ns": t.median_ns / max(1, num_requests * images)}
    if cold is not None:
        row["cold_ns"] = cold.median_ns
    return row


def profile_step(num_requests: int = 128, images: int = 32, *, top: int = 12, patched: bool = False) -> list[dict]:
    """cProfile of one ``compute_mm_prefix_ranges`` call: the ``top`` functions by own time (us)."""
    placeholder, _, compute = vllm_objects()
    with patched_placeholder(placeholder) if patched else contextlib.nullcontext():
        feats = make_features(num_requests, images, placeholder_cls=placeholder, feature_factory=_vllm_feature)
        compute(feats)  # warm (and fill the cache when patched)
        prof = cProfile.Profile()
        prof.runcall(compute, feats)
    rows = [{"function": f"{Path(file).name}:{line}({func})" if line else func, "ncalls": nc, "tottime_us": tt * 1e6,
             "cumtime_us": ct * 1e6} for (file, line, func), (_, nc, tt, ct, _) in pstats.Stats(prof).stats.items()]
    return sorted(rows, key=lambda r: r["tottime_us"], reverse=True)[:top]


def torch_op_counts(num_requests: int = 128, images: int = 32, *, patched: bool = False) -> dict[str, int]:
    """Number of each aten op one ``compute_mm_prefix_ranges`` call runs (torch.profiler)."""
    placeholder, _, compute = vllm_objects()
    with patched_placeholder(placeholder) if patched else contextlib.nullcontext():
        feats = make_features(num_requests, images, placeholder_cls=placeholder, feature_factory=_vllm_feature)
        compute(feats)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            compute(feats)
    return dict(Counter(ev.name for ev in prof.events() if ev.name.startswith("aten::")).most_common())


# --------------------------------------------------------------------------------------
# Reading recorded results (main venv, no vLLM needed)
# --------------------------------------------------------------------------------------


def side_by_side(rows: Sequence[dict]) -> list[dict]:
    """One record per (machine, requests, images): installed and patched medians in us, speedup."""
    table: dict[tuple, dict] = {}
    for r in rows:
        key = (r.get("machine"), r["num_requests"], r["images"])
        rec = table.setdefault(key, {"machine": key[0], "num_requests": key[1], "images": key[2]})
        rec[f"{r['variant']}_us"] = r["median_ns"] / 1e3
    for rec in table.values():
        if "installed_us" in rec and "patched_us" in rec:
            rec["speedup"] = rec["installed_us"] / rec["patched_us"]
            rec["saved_us"] = rec["installed_us"] - rec["patched_us"]
    return sorted(table.values(), key=lambda d: (str(d["machine"]), d["num_requests"], d["images"]))


def gpu_idle_table(rows: Sequence[dict], device_step_ms: float) -> list[dict]:
    """:func:`side_by_side`'s records with the share of a ``device_step_ms`` step the GPU would idle, both sides."""
    out = []
    for rec in side_by_side(rows):
        if "speedup" in rec:
            eff = expected_effect(rec["installed_us"] / 1e3, rec["patched_us"] / 1e3, device_step_ms)
            out.append(dict(rec, installed_idle_frac=eff["gpu_idle_fraction_installed_overlapped"],
                            patched_idle_frac=eff["gpu_idle_fraction_patched_overlapped"]))
    return out


def lookup(rows: Sequence[dict], num_requests: int, images: int) -> dict | None:
    """The side-by-side record for a grid point, or None if it was not measured."""
    return next((rec for rec in side_by_side(rows) if (rec["num_requests"], rec["images"]) == (num_requests, images)),
                None)


def expected_effect(host_installed_ms: float, host_patched_ms: float, device_step_ms: float) -> dict:
    """Step time, GPU idle share and speedup per decode step with the range build on the host path (ms).

    Under the one step model (:mod:`labkit.step_model`): ``overlapped`` (async) and ``serial`` (sync).
    """
    from labkit.step_model import both_regimes

    if min(host_installed_ms, host_patched_ms) < 0 or device_step_ms <= 0:
        raise UsageError("host times must be >= 0 and the device step time > 0")
    out = {"device_step_ms": device_step_ms}
    for name, host in (("installed", host_installed_ms), ("patched", host_patched_ms)):
        steps = both_regimes(device_step_ms, host)
        for regime, bound in (("async", "overlapped"), ("sync", "serial")):
            out[f"step_ms_{name}_{bound}"] = steps[regime].step_ns
            out[f"gpu_idle_fraction_{name}_{bound}"] = steps[regime].device_idle_ns / steps[regime].step_ns
    for bound in ("overlapped", "serial"):
        out[f"speedup_{bound}"] = out[f"step_ms_installed_{bound}"] / out[f"step_ms_patched_{bound}"]
    return out


def device_step_ms(gpu: str = "h200") -> tuple[float, str]:
    """The device step (ms) the GPU bounds assume, and its source: the lab's roofline at #40143's shape on ``gpu``."""
    from labkit.gpu.device_model import full_batch_device_ns
    from labkit.vllm.serving import get_workload, prompt_layout

    w = get_workload("full")
    ns = full_batch_device_ns(gpu, w.requests, prompt_layout(w)[0])
    return round(ns / 1e6, 2), f"the Gemma-4-E4B roofline's full-batch decode step on the {gpu.upper()} (simulated)"


def host_comparison(num_requests: int = 128, images: int = 32, root=None) -> list[dict]:
    """Per machine, the recorded host time (ms) of one range build at ``num_requests`` x ``images``."""
    out = [{"machine": r["machine"], "what": "vllm installed", "median_ms": r["median_ns"] / 1e6, "source": r["source"]}
           for r in results_rows(find_all(VLLM_PREFIX_RANGES, root=root))
           if r["variant"] == "installed" and r["num_requests"] == num_requests and r["images"] == images]
    for res in find_all(RANGES_STEP, root=root):
        for r in res.rows:
            if (r.get("variant") == "v033" and r.get("num_requests") == num_requests
                    and r.get("images_per_request") == images):
                out.append({"machine": res.slug, "what": "lab v033 builder", "median_ms": r["median_ns"] / 1e6,
                            "source": res.source})
    return sorted(out, key=lambda d: (d["what"], d["machine"]))


def saved_profile(results) -> tuple[list[dict], dict[str, int]]:
    """The cProfile rows and aten-op counts saved with the newest ``--profile`` run of ``results``
    (``vllm_prefix_ranges`` results), or empty."""
    newest = sorted(results, key=lambda r: r.created, reverse=True)
    res = next((r for r in newest if "profile_128x32" in r.params), None)
    return (res.params["profile_128x32"], res.params.get("aten_ops_128x32", {})) if res else ([], {})


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_grid_options(p)
    add_run_options(p, size_help="quick (default: 3 x 3 grid, fewer checks; saved as vllm_prefix_ranges_quick) or full")
    p.add_argument("--checks", type=int, default=None, help="randomized equivalence cases (default 300, quick 60)")
    p.add_argument("--repeats", type=int, default=7, help="timing samples per point")
    p.add_argument("--profile", action="store_true", help="print a cProfile and aten-op count of one 128 x 32 call")


def main(args: argparse.Namespace) -> int:
    """Verify the patch, sweep, save; returns the exit code."""
    size = resolve_run_options(args)
    grid = grid_from_args(args, PREFIX.at(size))
    if args.repeats < 1:
        raise UsageError("--repeats must be >= 1")
    checks = PREFIX.at(size, checks=args.checks)["checks"]
    if checks < 1:
        raise UsageError("--checks must be >= 1")
    version = vllm_version()
    logging.basicConfig(level=logging.WARNING)
    n = check_patch(checks)
    print(f"vLLM {version}: patched compute_mm_prefix_ranges == installed on {n} randomized cases")
    params = {"vllm_version": version, "placeholder_len": GEMMA_PLACEHOLDER_LEN,
              "mask": "gemma (first and last token not embedded)",
              "grid": {k: list(grid[k]) for k in PREFIX.axes}, "equivalence_cases": n,
              "patch": "patches/vllm-0.33.0-cache-embeds-ranges.diff", "torch": torch.__version__}
    if args.profile:
        profile, ops = profile_step(), torch_op_counts()
        print("cProfile, one call at 128 requests x 32 images (installed):")
        print(format_table(profile))
        print("aten ops per call:", ", ".join(f"{k} x{v}" for k, v in list(ops.items())[:8]))
        params.update(profile_128x32=profile, aten_ops_128x32=ops, aten_ops_128x32_total=sum(ops.values()))
    rows = PREFIX.sweep(size, requests=grid["requests"], images=grid["images"], repeats=args.repeats)
    report(args, PREFIX.result(rows, size, params=params), PREFIX.columns)
    return 0
