"""``labkit bench engine``: the mini engine per variant: tokens/s, step time, TPOT, device idle.

More: docs/reference.md, ``labkit.engine.bench_engine``.
"""

from __future__ import annotations

import argparse
import itertools

from labkit.bench import add_run_options, report, resolve_run_options
from labkit.engine.runs import DEFAULT_VARIANTS, ENGINE_RUNS, _csv, cudagraph_modes, default_profile_name, run_variants
from labkit.errors import UsageError


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (cuda if present, else sim), sim, cuda or cpu "
                   "(cpu: real tiny-model math, for checks)")
    p.add_argument("--model", help="model preset (default: gemma4-e4b-like; tiny on --device cpu)")
    p.add_argument("--workload", help="workload preset (default: pr40143)")
    p.add_argument("--num-requests", type=int, help="override the workload's request count")
    p.add_argument("--steps", type=int, help="measured steps per variant")
    p.add_argument("--warmup", type=int, help="warm-up steps per variant")
    p.add_argument("--placeholders", help="comma list for --grid (default tensor,list,fast)")
    p.add_argument("--scheduling", help="comma list for --grid (default loop,cursor)")
    p.add_argument("--prefix-ranges", help="comma list for --grid (default none,per_layer,per_step,cached)")
    p.add_argument("--grid", action="store_true", help="run the full product of the three lists")
    p.add_argument("--cudagraph", default=None, help="CUDA-graph mode(s), a comma list of none, piecewise, "
                   "full (default none: eager)")
    p.add_argument("--sync", action="store_true", help="also run every variant with sync scheduling")
    p.add_argument("--profile", default=None, help="simulated-device profile: a name under data/profiles, "
                   "a JSON path, or 'parametric' (default: the recorded h200 profile if present)")
    p.add_argument("--trace-dir", help="write one profiler trace folder per variant under this directory")
    p.add_argument("--write-profile", metavar="PATH", help="GPU only: record per-op durations as a profile JSON")
    p.add_argument("--name", default="engine", help="result name (default: engine)")
    add_run_options(p, size_help="quick (default: few measured steps; saved as <name>_quick) or full (more steps)")


def variant_list(args) -> list[tuple[str, str, str, bool, str]]:
    """(placeholder, scheduling, prefix_ranges, async, cudagraph) tuples to run."""
    from labkit.attn.prefix_ranges import PREFIX_RANGE_STRATEGIES
    from labkit.mm.placeholder import PLACEHOLDER_VARIANTS
    from labkit.mm.scheduler import SCHEDULING_STRATEGIES

    if args.grid or args.placeholders or args.scheduling or args.prefix_ranges:
        ph = _csv(args.placeholders or "tensor,list,fast")
        sc = _csv(args.scheduling or "loop,cursor")
        pr = _csv(args.prefix_ranges or "none,per_layer,per_step,cached")
        for name, known in (("placeholder", PLACEHOLDER_VARIANTS), ("scheduling", SCHEDULING_STRATEGIES),
                            ("prefix-range", {"none": 1, **PREFIX_RANGE_STRATEGIES})):
            vals = {"placeholder": ph, "scheduling": sc, "prefix-range": pr}[name]
            bad = [v for v in vals if v not in known]
            if bad or not vals:
                raise UsageError(f"unknown {name} choice(s) {bad or vals}: choose from {', '.join(known)}")
        base = list(itertools.product(ph, sc, pr))
    else:
        base = list(DEFAULT_VARIANTS)
    modes = (True, False) if args.sync else (True,)
    graphs = cudagraph_modes(getattr(args, "cudagraph", None))
    return [(a, b, c, m, g) for g in graphs for m in modes for (a, b, c) in base]


def resolve_kind(choice: str) -> str:
    from labkit.device import has_cuda, resolve_device

    choice = (choice or "auto").lower()
    if choice == "sim" or (choice == "auto" and not has_cuda()):
        return "sim"
    if choice not in ("auto", "cuda", "cpu"):
        raise UsageError(f"unknown device {choice!r}: use auto, sim, cuda or cpu")
    return resolve_device(choice)  # cuda where asked for and there is none: its UsageError


def main(args: argparse.Namespace) -> int:
    from dataclasses import replace

    size = resolve_run_options(args)
    kind = resolve_kind(args.device)
    at = ENGINE_RUNS[kind].at(size, model=args.model, workload=args.workload, steps=args.steps, warmup=args.warmup)
    model, workload, nreq, steps, warmup = at["model"], at["workload"], args.num_requests, at["steps"], at["warmup"]
    if steps < 2 or warmup < 1:
        raise UsageError("need --steps >= 2 and --warmup >= 1")
    if nreq is not None and nreq < 1:
        raise UsageError("--num-requests must be >= 1")
    if args.write_profile and kind != "cuda":
        raise UsageError("--write-profile needs a CUDA GPU (it records real device durations)")
    from labkit.engine.config import get_model_config
    from labkit.engine.device.profiles import load_profile
    from labkit.mm.workload import get_workload_spec

    get_model_config(model)
    get_workload_spec(workload)
    variants = variant_list(args)
    if kind == "cpu" and any(v[4] != "none" for v in variants):
        raise UsageError("--cudagraph piecewise/full needs a CUDA GPU (--device cuda) or the simulated device")
    profile = load_profile(args.profile or default_profile_name()) if kind == "sim" else None
    from labkit.device import describe_machine
    from labkit.results import PartialResult

    params = {"device": kind, "model": model, "workload": workload, "num_requests": nreq, "steps": steps,
              "warmup": warmup, "start_in_decode": True, "cudagraph": cudagraph_modes(args.cudagraph),
              **(profile.describe() if profile is not None else {})}
    spec = replace(ENGINE_RUNS[kind], name=args.name, params=params)
    machine = describe_machine("cuda" if kind == "cuda" else "cpu")
    draft = spec.result([], size, machine=machine)
    partial = PartialResult(draft.name, params=draft.params, source=draft.source, size=size, machine=machine,
                            save=not args.no_save)
    rows, traces = run_variants(kind, variants, model=model, workload=workload, num_requests=nreq, steps=steps,
                                warmup=warmup, profile=profile, trace_dir=args.trace_dir, on_rows=partial.update)
    report(args, spec.result(rows, size, machine=machine), spec.columns)
    for r in rows:
        if r.get("idle_status") == "tentative":
            print(f"* {r['variant']}: idle tentative: {r['idle_check']}")
        if r.get("cudagraph_note"):
            same = f" (the figures of {r['same_run_as']}: one run)" if r.get("same_run_as") else ""
            print(f"* {r['variant']}: {r['cudagraph_note']}{same}")
    if profile is not None:
        print(f"profile: {profile.label()}")
    for t in traces:
        print(f"trace {t}")
    if args.write_profile:
        _write_profile(args.write_profile, model)
    return 0


def _write_profile(path: str, model_name: str) -> None:
    import torch

    from labkit.device import describe_machine
    from labkit.engine.config import get_model_config
    from labkit.engine.model import TransformerStack
    from labkit.engine.device.profiles import save_profile
    from labkit.engine.record_profile import record_profile

    desc = describe_machine("cuda")
    model = TransformerStack(get_model_config(model_name), "cuda")
    prof = record_profile(model, name=desc["slug"], gpu_name=desc["gpu_name"] or "GPU")
    del model
    torch.cuda.empty_cache()
    print(f"profile {save_profile(prof, path)} ({len(prof.ops)} ops, launch {prof.launch_overhead_ns / 1e3:.1f} us, "
          f"graph replay {prof.replay_overhead_ns / 1e3:.1f} us)")

