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

Each variant is measured first, without a profiler (throughput both as ``tokens_per_s_median``,
tokens per step over the median step, and ``tokens_per_s_window``, over the whole measured
window; ``stall_ns`` shows a one-off stall), and only then profiled in a separate short run; the
profiler is started once before all variants so its one-off start-up never lands in a variant.
The result file is rewritten after each variant (rows so far, ``complete: false`` until the end:
``labkit.results.PartialResult``), so a run stopped part-way keeps the variants it finished.

On a GPU, a traced CUDA-graph run keeps CUPTI loaded between profiler sessions
(``TEARDOWN_CUPTI=0``, as PyTorch does for graphs under Inductor: tearing CUPTI down under live
graphs has crashed). The idle share read from a graph-mode trace is labelled ``idle_status``
``tentative``: CUPTI's records of graph kernels are reported wrong before CUDA 13.1 (kineto#1165),
so it stays tentative unless the kernels' busy time per profiled step in that trace agrees, within
``GRAPH_BUSY_TOLERANCE``, with the same variant's eager trace of this run (the same kernels,
launched one by one: ``checked``).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import sys
import time

from labkit.errors import UsageError

logger = logging.getLogger(__name__)

#: (placeholder, scheduling, prefix_ranges) of the default variant set
DEFAULT_VARIANTS = (
    ("tensor", "loop", "none"),
    ("list", "loop", "none"),
    ("fast", "cursor", "none"),
    ("fast", "cursor", "per_layer"),
    ("fast", "cursor", "per_step"),
    ("fast", "cursor", "pinned"),
    ("fast", "cursor", "cached"),
)

#: per device kind and size: (model, workload, num_requests, measured steps, warm-up steps)
SIZES = {
    ("sim", "quick"): ("gemma4-e4b-like", "pr40143", None, 4, 2),
    ("sim", "full"): ("gemma4-e4b-like", "pr40143", None, 20, 3),
    ("cuda", "quick"): ("gemma4-e4b-like", "pr40143", None, 8, 3),
    ("cuda", "full"): ("gemma4-e4b-like", "pr40143", None, 30, 5),
    ("cpu", "quick"): ("tiny", "small", None, 3, 1),
    ("cpu", "full"): ("tiny", "small", None, 3, 1),
}


#: profiled steps per traced variant (after one profiler warm-up step)
TRACE_STEPS = 2
#: profiler warm-up steps per traced variant (Kineto starts here; never inside the measured run)
TRACE_WARMUP = 1
#: largest relative difference of a graph run's kernel busy time per step from its eager run's for
#: its trace idle figure to count as checked (see the module docstring)
GRAPH_BUSY_TOLERANCE = 0.10


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


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


def cudagraph_modes(text: str | None) -> list[str]:
    """The ``--cudagraph`` comma list, checked against ``CUDAGRAPH_MODES``."""
    from labkit.engine.config import CUDAGRAPH_MODES

    modes = _csv(text or "none")
    bad = [m for m in modes if m not in CUDAGRAPH_MODES]
    if bad or not modes:
        raise UsageError(f"unknown cudagraph mode(s) {bad or modes}: choose from {', '.join(CUDAGRAPH_MODES)}")
    return list(dict.fromkeys(modes))


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


def default_profile_name() -> str:
    """The recorded profile to simulate by default: ``h200`` if present, else ``parametric``."""
    from labkit.engine.profiles import PARAMETRIC_NAME, list_profiles

    names = list_profiles()
    return "h200" if "h200" in names else PARAMETRIC_NAME


def run_variants(kind: str, variants, *, model: str, workload: str, num_requests, steps: int, warmup: int,
                 profile=None, trace_dir=None, progress_desc: str = "engine",
                 on_rows=None) -> tuple[list[dict], list[str]]:
    """Run each variant; returns (summary rows, trace paths). Real models are built once and shared;
    the variants run with the heap alive before them frozen out of the collector, as in vLLM
    (``labkit.engine.loop.frozen_gc_heap``). ``on_rows(rows)`` is called with every row so far after
    each variant (e.g. ``PartialResult.update``)."""
    from labkit.attn.prefix_ranges import warm_up
    from labkit.engine.config import EngineConfig, get_model_config
    from labkit.engine.devices import make_device
    from labkit.engine.loop import Engine, frozen_gc_heap
    from labkit.engine.model import TransformerStack

    shared_model = None
    warm_up("cuda" if kind == "cuda" else "cpu")  # torch's first-use imports, before any variant runs
    if trace_dir and kind == "cuda" and any(_with_graph(v)[4] != "none" for v in variants):
        os.environ.setdefault("TEARDOWN_CUPTI", "0")  # see the module docstring; read when a session stops
    if trace_dir and kind in ("cuda", "cpu"):
        from labkit.trace.capture import warm_up_profiler

        warm_up_profiler(cuda=kind == "cuda")  # one-off Kineto/CUPTI start-up, outside every variant
    if kind in ("cuda", "cpu"):
        shared_model = TransformerStack(get_model_config(model), kind)
        # compile and warm every kernel once (ranges on and off) so no variant pays for it
        for pr in ("none", "per_step"):
            warm = Engine(EngineConfig(model=model, workload=workload, num_requests=num_requests,
                                       placeholder="fast", scheduling="cursor", prefix_ranges=pr),
                          make_device(kind), model=shared_model)
            warm.run(3)
    with frozen_gc_heap():  # as vLLM's engine core, once started
        return _run_each(kind, variants, model=model, workload=workload, num_requests=num_requests, steps=steps,
                         warmup=warmup, profile=profile, trace_dir=trace_dir, progress_desc=progress_desc,
                         shared_model=shared_model, on_rows=on_rows or (lambda rows: None))


def _run_each(kind, variants, *, model, workload, num_requests, steps, warmup, profile, trace_dir, progress_desc,
              shared_model, on_rows) -> tuple[list[dict], list[str]]:
    from labkit.engine.config import EngineConfig
    from labkit.engine.devices import make_device
    from labkit.engine.graphs import effective_mode
    from labkit.engine.loop import Engine, summarize_run
    from labkit.progress import progress
    from labkit.trace.capture import make_capture

    rows, traces = [], []
    runners: dict = {}  # real GPU: graphs captured once per (mode, ranges) and shared by the variants
    ran: dict = {}  # (variant, mode run) -> its row, shared by a mode that falls back to it
    for ph, sc, pr, is_async, graph in progress([_with_graph(v) for v in variants], total=len(variants),
                                                desc=progress_desc):
        cfg = EngineConfig(model=model, workload=workload, num_requests=num_requests, placeholder=ph,
                           scheduling=sc, prefix_ranges=pr, async_scheduling=is_async, cudagraph=graph)
        mode_run, note = effective_mode(graph, pr)
        same = ran.get((ph, sc, pr, is_async, mode_run))
        if same is not None:
            rows.append(dict(same, variant=cfg.variant_name(), cudagraph=graph, cudagraph_note=note,
                             same_run_as=same["variant"]))
            on_rows(rows)
            continue
        dev = make_device(kind, profile=profile)
        engine = Engine(cfg, dev, model=shared_model,
                        graph_runner=runners.get(_runner_key(cfg)) if kind == "cuda" else None)
        if kind == "cuda" and engine.runner is not None:
            engine.capture_graphs()  # before any measured step (a shared runner captured already)
            runners[_runner_key(cfg)] = engine.runner
        meta = {"variant": cfg.variant_name(), "placeholder": ph, "scheduling": sc, "prefix_ranges": pr,
                "async_scheduling": is_async, "model": model, "workload": workload, "source": dev.source,
                "cudagraph": graph, "cudagraph_run": engine.graph_mode, "cudagraph_note": engine.graph_note}
        if kind == "sim":
            meta.update(dev.profile.describe())
        run_name = cfg.variant_name().replace("/", "-")
        t0 = time.perf_counter()
        # Measured run first, without any profiler: one step more than measured, so the last
        # measured step's tokens are collected in steady state (async: while the next step runs).
        engine.run(warmup + steps + 1)
        row = summarize_run(engine, warmup_steps=warmup, measured_steps=steps)
        # Then a separate profiled run: the profiler starts (and may stall the host) only after
        # every measured output has been collected, so it can never enter the numbers.
        cap = make_capture(dev, trace_dir, run_name, metadata=meta, wait=0, warmup=TRACE_WARMUP,
                           active=TRACE_STEPS)
        if trace_dir:
            with cap:
                engine.run(TRACE_WARMUP + TRACE_STEPS, capture=cap)
        row["source"] = dev.source
        row["wall_s"] = time.perf_counter() - t0
        if kind == "sim":
            row.update(dev.profile.describe())
        paths = [str(p) for p in getattr(cap, "paths", [])]
        if paths:
            row["trace"] = paths[0]
            if kind == "cuda":
                row.update(_trace_idle(paths[0]))
                if engine.graph_mode != "none":
                    row.update(graph_idle_check(row, ran.get((ph, sc, pr, is_async, "none"))))
        traces.extend(paths)
        rows.append(row)
        ran[(ph, sc, pr, is_async, mode_run)] = row
        on_rows(rows)
        logger.info("%s: %.0f tok/s (median step)", cfg.variant_name(), row["tokens_per_s_median"])
    return rows, traces


def _with_graph(v: tuple) -> tuple:
    """Variant tuples without a CUDA-graph mode run eagerly."""
    return tuple(v) if len(v) == 5 else (*v, "none")


def _runner_key(cfg) -> tuple:
    from labkit.engine.graphs import effective_mode

    mode = effective_mode(cfg.cudagraph, cfg.prefix_ranges)[0]
    return mode, mode == "full" and cfg.prefix_ranges != "none"  # only full graphs read the ranges


def run_notebook_set(size: str = "quick", *, trace_dir=None, profile=None, save: bool = True,
                     cudagraph=("none",)):
    """The default variants on the simulated device for the notebook; returns ``(rows, traces)``.

    ``cudagraph``: the CUDA-graph modes to run every variant in (``none``, ``piecewise``, ``full``).

    ``size``: ``quick`` (128 requests, 4 measured steps) or ``full`` (20 steps). Rows are saved as
    result ``engine_sim`` (``engine_sim_quick`` in quick size) (source simulated) when ``save``; traces map variant -> file.
    """
    from labkit.device import describe_machine
    from labkit.engine.profiles import load_profile
    from labkit.results import make_result, save_result, sized_name

    if size not in ("quick", "full"):
        raise UsageError(f"size must be quick or full, got {size!r}")
    model, workload, nreq, steps, warmup = SIZES[("sim", size)]
    prof = profile if profile is not None else load_profile(default_profile_name())
    variants = [(a, b, c, True, g) for g in cudagraph_modes(",".join(cudagraph)) for a, b, c in DEFAULT_VARIANTS]
    rows, paths = run_variants("sim", variants, model=model, workload=workload, num_requests=nreq, steps=steps,
                               warmup=warmup, profile=prof, trace_dir=trace_dir)
    if save:
        save_result(make_result(sized_name("engine_sim", size), rows, source="simulated", machine=describe_machine("cpu"),
                                params={"size": size, "model": model, "workload": workload,
                                        "cudagraph": list(cudagraph), **prof.describe()}))
    traces = {r["variant"]: r["trace"] for r in rows if r.get("trace")}
    return rows, traces


def _trace_idle(path: str) -> dict:
    """Device idle share of the busiest stream in a real trace (the figure `labkit analyze` prints)."""
    from labkit.trace.analysis.device.idle import busiest_stream_idle

    idle = busiest_stream_idle(path)
    return {**idle, "idle_from": "trace of the profiled steps (profiler overhead included)"} if idle else {}


def graph_idle_check(graph_row: dict, eager_row: dict | None) -> dict:
    """``idle_status`` of a graph-mode row's trace idle figure: ``checked`` when its kernel busy time
    per profiled step is within ``GRAPH_BUSY_TOLERANCE`` of the eager run's (same variant, same
    run), else ``tentative``; ``idle_check`` says what was compared (see the module docstring)."""
    busy = graph_row.get("trace_busy_us")
    ref = (eager_row or {}).get("trace_busy_us")
    if not busy or not ref:
        return {"idle_status": "tentative",
                "idle_check": "no eager trace of this variant in the run to check the graph kernels' "
                              "durations against (CUDA-graph profiling before CUDA 13.1: kineto#1165)"}
    diff = busy / ref - 1.0
    ok = abs(diff) <= GRAPH_BUSY_TOLERANCE
    return {"idle_status": "checked" if ok else "tentative",
            "idle_check": f"kernel busy per profiled step {busy / TRACE_STEPS:.0f} us under graphs vs "
                          f"{ref / TRACE_STEPS:.0f} us eager ({100 * diff:+.1f}%, tolerance "
                          f"{100 * GRAPH_BUSY_TOLERANCE:.0f}%)"}


def print_table(rows: list[dict]) -> None:
    """The summary table: tok/s from the median step and from the whole window, step time, TPOT, idle."""
    from labkit.engine.recorded import with_robust_metrics

    head = (f"{'variant':40s} {'graphs':>9s} {'tok/s med':>9s} {'tok/s win':>9s} {'step ms':>8s} {'TPOT ms':>8s} "
            f"{'idle':>6s} {'sched ms':>9s} {'h2d/step':>8s}")
    print(head)
    notes = []
    for r in with_robust_metrics(rows):
        idle = r.get("device_idle_frac")
        idle_s = f"{idle:6.2f}" if isinstance(idle, float) else f"{'n/a':>6s}"
        if r.get("idle_status") == "tentative":
            idle_s = f"{idle_s.strip()}?".rjust(6)
            notes.append(f"{r['variant']}: idle tentative: {r['idle_check']}")
        graphs = r.get("cudagraph_run") or r.get("cudagraph") or "none"
        if r.get("cudagraph_note"):
            same = f" (the figures of {r['same_run_as']}: one run)" if r.get("same_run_as") else ""
            notes.append(f"{r['variant']}: {r['cudagraph_note']}{same}")
            graphs += "*"
        print(f"{r['variant']:40s} {graphs:>9s} {r['tokens_per_s_median']:9.0f} {r['tokens_per_s_window']:9.0f} "
              f"{r['median_ns'] / 1e6:8.2f} {r['tpot_mean_ms']:8.2f} {idle_s} {r['host_schedule_ns'] / 1e6:9.2f} "
              f"{r['h2d_per_step']:8.0f}")
    print("tok/s med: tokens per step / median step time; tok/s win: tokens / measured window "
          "(includes one-off stalls); TPOT: mean time between outputs; graphs: CUDA-graph mode run; "
          "idle ?: tentative")
    for n in notes:
        print(f"* {n}")


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
    from labkit.engine.profiles import load_profile
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
    from labkit.engine.profiles import load_profile
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
    from labkit.engine.profiles import save_profile
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
