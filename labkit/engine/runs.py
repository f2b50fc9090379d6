"""The mini engine run per variant: measured, then profiled; the notebook's set.

More: docs/reference.md, ``labkit.engine.runs``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

from labkit.bench import Bench
from labkit.errors import UsageError
from labkit.results import ENGINE
from labkit.timing import stopwatch

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

_GEMMA = {"model": ("gemma4-e4b-like",) * 2, "workload": ("pr40143",) * 2}
#: the result per device kind: model, workload, measured and warm-up steps at each size, and its table
ENGINE_COLUMNS = ("variant", "cudagraph_run", "tokens_per_s_median", "tokens_per_s_window", "median_ns",
                  "tpot_mean_ms", "device_idle_frac", "idle_status", "host_schedule_ns", "h2d_per_step")
ENGINE_RUNS = {
    "sim": Bench(ENGINE, knobs={**_GEMMA, "steps": (4, 20), "warmup": (2, 3)}, source="simulated",
                 columns=ENGINE_COLUMNS),
    "cuda": Bench(ENGINE, knobs={**_GEMMA, "steps": (8, 30), "warmup": (3, 5)}, source="measured-gpu",
                  columns=ENGINE_COLUMNS),
    "cpu": Bench(ENGINE, knobs={"model": ("tiny",) * 2, "workload": ("small",) * 2, "steps": (3, 3), "warmup": (1, 1)},
                 source="measured-cpu", columns=ENGINE_COLUMNS),
}


#: profiled steps per traced variant (after one profiler warm-up step)
TRACE_STEPS = 2
#: profiler warm-up steps per traced variant (Kineto starts here; never inside the measured run)
TRACE_WARMUP = 1
#: largest relative difference of a graph run's kernel busy time per step from its eager run's for
#: its trace idle figure to count as checked (docs/reference.md)
GRAPH_BUSY_TOLERANCE = 0.10


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def cudagraph_modes(text: str | None) -> list[str]:
    """The ``--cudagraph`` comma list, checked against ``CUDAGRAPH_MODES``."""
    from labkit.engine.config import CUDAGRAPH_MODES

    modes = _csv(text or "none")
    bad = [m for m in modes if m not in CUDAGRAPH_MODES]
    if bad or not modes:
        raise UsageError(f"unknown cudagraph mode(s) {bad or modes}: choose from {', '.join(CUDAGRAPH_MODES)}")
    return list(dict.fromkeys(modes))


def default_profile_name() -> str:
    """The recorded profile to simulate by default: ``h200`` if present, else ``parametric``."""
    from labkit.engine.device.profiles import PARAMETRIC_NAME, list_profiles

    names = list_profiles()
    return "h200" if "h200" in names else PARAMETRIC_NAME


def run_variants(kind: str, variants, *, model: str, workload: str, num_requests, steps: int, warmup: int,
                 profile=None, trace_dir=None, progress_desc: str = "engine",
                 on_rows=None) -> tuple[list[dict], list[str]]:
    """Run each variant; returns (summary rows, trace paths); ``on_rows(rows)`` after each variant."""
    from labkit.attn.prefix_ranges import warm_up
    from labkit.engine.config import EngineConfig, get_model_config
    from labkit.engine.device.devices import make_device
    from labkit.engine.loop import Engine, frozen_gc_heap
    from labkit.engine.model import TransformerStack

    shared_model = None
    warm_up("cuda" if kind == "cuda" else "cpu")  # torch's first-use imports, before any variant runs
    if trace_dir and kind == "cuda" and any(_with_graph(v)[4] != "none" for v in variants):
        os.environ.setdefault("TEARDOWN_CUPTI", "0")  # see docs/reference.md; read when a session stops
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
    from labkit.engine.device.devices import make_device
    from labkit.engine.graphs import effective_mode
    from labkit.engine.loop import Engine, summarize_run
    from labkit.timing import progress
    from labkit.engine.device.sim_trace import device_capture
    from labkit.trace.capture import trace_path

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
        with stopwatch() as wall:
            # Measured run first, without any profiler: one step more than measured, so the last
            # measured step's tokens are collected in steady state (async: while the next step runs).
            engine.run(warmup + steps + 1)
            row = summarize_run(engine, warmup_steps=warmup, measured_steps=steps)
            # Then a separate profiled run: the profiler starts (and may stall the host) only after
            # every measured output has been collected, so it can never enter the numbers.
            path = trace_path(trace_dir, run_name) if trace_dir else None
            if path is not None:
                with device_capture(dev, path, metadata=meta, warmup=TRACE_WARMUP, active=TRACE_STEPS) as cap:
                    engine.run(TRACE_WARMUP + TRACE_STEPS, capture=cap)
        row["source"] = dev.source
        row["wall_s"] = wall.s
        if kind == "sim":
            row.update(dev.profile.describe())
        paths = [str(path)] if path is not None and path.is_file() else []
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
    from labkit.engine.device.profiles import load_profile
    from labkit.results import ENGINE_SIM, save_result

    at = ENGINE_RUNS["sim"].at(size)
    prof = profile if profile is not None else load_profile(default_profile_name())
    variants = [(a, b, c, True, g) for g in cudagraph_modes(",".join(cudagraph)) for a, b, c in DEFAULT_VARIANTS]
    rows, paths = run_variants("sim", variants, model=at["model"], workload=at["workload"], num_requests=None,
                               steps=at["steps"], warmup=at["warmup"], profile=prof, trace_dir=trace_dir)
    if save:
        save_result(replace(ENGINE_RUNS["sim"], name=ENGINE_SIM).result(
            rows, size, machine=describe_machine("cpu"), params={"model": at["model"], "workload": at["workload"],
                                                                  "cudagraph": list(cudagraph), **prof.describe()}))
    traces = {r["variant"]: r["trace"] for r in rows if r.get("trace")}
    return rows, traces


def _trace_idle(path: str) -> dict:
    """Device idle share of the busiest stream in a real trace (``{}`` when it has no device work)."""
    from labkit.trace import Trace

    t = Trace(path).idle()
    if len(t) == 0:
        return {}
    r = t.sort_values("busy_us", ascending=False, kind="stable").iloc[0]
    return {"device_idle_frac": float(r["idle_fraction"]) if r["span_us"] > 0 else None,
            "trace_idle_us": float(r["idle_us"]), "trace_busy_us": float(r["busy_us"]),
            "idle_from": "trace of the profiled steps (profiler overhead included)"}


def graph_idle_check(graph_row: dict, eager_row: dict | None) -> dict:
    """``idle_status`` of a graph-mode row: ``checked`` when its busy time matches the eager run's."""
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
