"""``labkit bench engine``: the mini engine per variant: tokens/s, step time, TPOT, device idle.

Variants combine a placeholder variant (#40143), a scheduling strategy and a prefix-range
strategy (#38794), each with async (default) or sync scheduling. The default set tells both
stories with the fewest runs::

    tensor/loop/none   list/loop/none   fast/cursor/none          (#40143: before, after, beyond)
    fast/cursor/per_layer  per_step  pinned  cached               (#38794: before, after, beyond)

``--grid`` runs the full product of ``--placeholders x --scheduling x --prefix-ranges``;
``--cudagraph none,piecewise,full`` runs every variant in each CUDA-graph mode (see
``labkit.engine.graphs``; default ``none``, eager). Rows name the mode (``cudagraph``), the mode
actually run (``cudagraph_run``) and why they differ (``cudagraph_note``); a mode that falls back
to one the same variant already ran in (``full`` -> ``piecewise`` for ``per_layer``) is not run
twice, on any device: its row repeats that run's figures and names it (``same_run_as``), and only
the run itself writes a trace folder.
On a CPU the engine runs on the simulated device (``source: simulated``, named profile); on a
GPU it runs the real model (``measured-gpu``); ``--trace-dir`` writes one trace folder per
variant, and ``--write-profile PATH`` (GPU only) records this GPU's per-op durations as a
simulated-device profile.

How each variant runs (measured first, without a profiler, then profiled in a separate short run)
and when a graph-mode trace's idle share counts as checked: :mod:`labkit.engine.runs`.
The result file is rewritten after each variant (rows so far, ``complete: false`` until the end:
``labkit.results.PartialResult``), so a run stopped part-way keeps the variants it finished.
"""

from __future__ import annotations

import argparse
import itertools
import sys

from labkit.engine.runs import (DEFAULT_VARIANTS, SIZES, _csv, cudagraph_modes, default_profile_name, print_table,
                               run_variants)
from labkit.errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="labkit bench engine", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
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
                   "full (default none: eager; with --host-from all three)")
    p.add_argument("--sync", action="store_true", help="also run every variant with sync scheduling")
    p.add_argument("--profile", default=None, help="simulated-device profile: a name under data/profiles, "
                   "a JSON path, or 'parametric' (default: the recorded h200 profile if present)")
    p.add_argument("--trace-dir", help="write one profiler trace folder per variant under this directory")
    p.add_argument("--write-profile", metavar="PATH", help="GPU only: record per-op durations as a profile JSON")
    p.add_argument("--name", default=None, help="result name (default: engine; engine_vllm_host with --host-from, "
                   "engine_vllm_host_off_host with --host-forward off-host)")
    p.add_argument("--host-from", metavar="VLLM_STEP_JSON", default=None,
                   help="sim only: take each phase's host cost per variant from a recorded vLLM step census "
                        "(labkit bench vllm-step) instead of the mini engine's own host (labkit.engine.hostfrom)")
    p.add_argument("--cpu-speed", type=float, default=1.0,
                   help="with --host-from: multiply the census's host costs by this (1.0: the census's CPU; "
                        "0.5: a host twice as fast)")
    p.add_argument("--host-forward", default="cpu", choices=("cpu", "off-host"),
                   help="with --host-from: the census's steps as measured beside the CPU's forward (cpu, default) "
                        "or those it timed with the forward off the host, as a GPU server's host pays them "
                        "(off-host; result engine_vllm_host_off_host)")
    p.add_argument("--host-point", default="128x32",
                   help="with --host-from: the census point (requests x images) to take (default 128x32)")
    from labkit.cli import add_run_options

    add_run_options(p, json_help="also write the result JSON to OUT",
                    size_help="quick (default: few measured steps; saved as <name>_quick) or full (more steps)")
    return p


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
    from labkit.device import has_cuda

    choice = (choice or "auto").lower()
    if choice == "auto":
        return "cuda" if has_cuda() else "sim"
    if choice not in ("sim", "cuda", "cpu"):
        raise UsageError(f"unknown device {choice!r}: use auto, sim, cuda or cpu")
    if choice == "cuda" and not has_cuda():
        raise UsageError("device 'cuda' was asked for but torch sees no CUDA GPU")
    return choice


def _host_point(text: str) -> tuple[int, int]:
    try:
        n, m = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--host-point must look like 128x32 (requests x images), got {text!r}") from None
    if n < 1 or m < 1:
        raise UsageError(f"--host-point must be positive, got {text!r}")
    return n, m


def main_host_from(args, size: str) -> int:
    """``--host-from``: the simulated GPU with real vLLM's host, every variant x graph mode x sync/async."""
    from labkit.cli import emit_result
    from labkit.device import describe_machine
    from labkit.engine.hostfrom import load_host_table, ratio_rows, run_host_from, solve_published
    from labkit.engine.device.profiles import load_profile
    from labkit.mm.overlap import PR40143
    from labkit.results import make_result, sized_name

    if (args.device or "auto").lower() not in ("sim", "auto"):
        raise UsageError("--host-from runs on the simulated device only (--device sim)")
    n, m = _host_point(args.host_point)
    table = load_host_table(args.host_from, requests=n, images=m, cpu_speed=args.cpu_speed,
                            forward=args.host_forward)
    profile = load_profile(args.profile or default_profile_name())
    modes = cudagraph_modes(args.cudagraph or "none,piecewise,full")
    steps = args.steps if args.steps is not None else (12 if size == "full" else 6)
    warmup = args.warmup if args.warmup is not None else 3
    if steps < 2 or warmup < 1:
        raise UsageError("need --steps >= 2 and --warmup >= 1")
    rows = run_host_from(table, profile=profile, cudagraph=modes, steps=steps, warmup=warmup,
                         model=args.model or "gemma4-e4b-like", workload=args.workload or "pr40143")
    ratios = ratio_rows(rows, PR40143)
    if "baseline" not in table.phases_ns:
        raise UsageError("--host-from: the census has no baseline variant to compare with")
    solve = [dict(q, after=a) for a in ("pr40143", "merged") if a in table.phases_ns
             for q in solve_published(table, PR40143, after=a)]
    print_host_from(rows, ratios, solve, table, PR40143)
    params = {"device": "sim", "size": size, "host_from": table.origin, "host_forward": table.forward,
              "host_point": f"{n}x{m}",
              "cpu_speed_factor": args.cpu_speed, "cudagraph": modes, "steps": steps, "warmup": warmup,
              "published": PR40143.name, "ratios": ratios, "solve": solve, **profile.describe()}
    name = args.name or ("engine_vllm_host_off_host" if table.forward == "off-host" else "engine_vllm_host")
    result = make_result(sized_name(name, size), rows, params=params, source="simulated",
                         size=size, machine=describe_machine("cpu"))
    emit_result(result, args)
    return 0


def print_host_from(rows, ratios, solve, table, published) -> None:
    """The rows, every one with its CPU-speed factor; the predicted ratios beside the PR's; the solve."""
    print(f"host: {table.origin}, point {table.requests}x{table.images}; device: simulated "
          f"({rows[0].get('profile', 'profile') if rows else ''})")
    print(f"{'vLLM variant':13s} {'engine':18s} {'graphs':>9s} {'sched':>5s} {'cpu x':>5s} {'tok/s':>8s} "
          f"{'TPOT ms':>8s} {'idle':>5s} {'core host ms':>12s} {'frontend ms':>11s}")
    for r in rows:
        print(f"{r['vllm_variant']:13s} {r['placeholder'] + '/' + r['scheduling']:18s} {r['cudagraph_run']:>9s} "
              f"{'async' if r['async_scheduling'] else 'sync':>5s} {r['cpu_speed_factor']:5.2f} "
              f"{r['tokens_per_s_median']:8.0f} {r['tpot_mean_ms']:8.2f} {r['device_idle_frac']:5.2f} "
              f"{r['engine_core_host_ms']:12.2f} {r['frontend_host_ms']:11.2f}")
    print(f"predicted before/after (published, {published.name}: output tok/s x{published.throughput_gain:.2f}, "
          f"mean TPOT {published.mean_tpot_ms_before} -> {published.mean_tpot_ms_after} ms):")
    for q in ratios:
        print(f"  {q['cudagraph']:>9s} {'async' if q['async_scheduling'] else 'sync':>5s} {q['before']} -> {q['after']:8s} "
              f"cpu x{q['cpu_speed_factor']:.2f}: tok/s x{q['tok_s_ratio']:.3f} (PR x{q['published_tok_s_ratio']:.2f}), "
              f"TPOT {q['tpot_before_ms']:.2f} -> {q['tpot_after_ms']:.2f} ms "
              f"(PR {q['published_tpot_before_ms']} -> {q['published_tpot_after_ms']})")
    print("what reproduces the PR's TPOTs (device step D, host speed factor s on this census's host):")
    for q in solve:
        d = "-" if q["device_step_ms"] is None else f"{q['device_step_ms']:.2f} ms"
        sf = "-" if q["cpu_speed_factor"] is None else f"{q['cpu_speed_factor']:.3f}"
        print(f"  baseline -> {q['after']:8s} {q['scheduling']:>5s}: s = {sf}, D = {d}: {q['how']}")


def main(argv: list[str] | None = None) -> int:
    from labkit.cli import emit_result, resolve_run_options

    args = build_parser().parse_args(argv)
    size = resolve_run_options(args, "labkit bench engine")
    if args.host_from:
        return main_host_from(args, size)
    if args.cpu_speed != 1.0 or args.host_point != "128x32" or args.host_forward != "cpu":
        raise UsageError("--cpu-speed, --host-point and --host-forward apply with --host-from only")
    args.name = args.name or "engine"
    kind = resolve_kind(args.device)
    model, workload, nreq, steps, warmup = SIZES[(kind, size)]
    model = args.model or model
    workload = args.workload or workload
    nreq = args.num_requests if args.num_requests is not None else nreq
    steps = args.steps if args.steps is not None else steps
    warmup = args.warmup if args.warmup is not None else warmup
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
    from labkit.results import PartialResult, make_result, sized_name

    source = "simulated" if kind == "sim" else ("measured-gpu" if kind == "cuda" else "measured-cpu")
    params = {"device": kind, "size": size, "model": model, "workload": workload, "num_requests": nreq,
              "steps": steps, "warmup": warmup, "start_in_decode": True,
              "cudagraph": cudagraph_modes(args.cudagraph)}
    if profile is not None:
        params.update(profile.describe())
    machine = describe_machine("cuda" if kind == "cuda" else "cpu")
    partial = PartialResult(sized_name(args.name, size), params=params, source=source, size=size, machine=machine,
                            save=not args.no_save)
    rows, traces = run_variants(kind, variants, model=model, workload=workload, num_requests=nreq, steps=steps,
                                warmup=warmup, profile=profile, trace_dir=args.trace_dir, on_rows=partial.update)
    result = make_result(sized_name(args.name, size), rows, params=params, source=source, size=size, machine=machine)
    print_table(rows)
    print(f"source: {source}" + (f" ({profile.label()})" if profile is not None else ""))
    emit_result(result, args)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
