"""What the step census must show about itself, and the scheduler-only figure it is checked against.

:func:`census_checks` reads the rows of :mod:`labkit.vllm.step_census` and returns one record per
check (``check``, ``passed``, ``detail`` and the figures compared):

``phases add up``
    per point and variant, the top-level phases' share of the measured step (median over the
    steps) is at least ``1 - SUM_TOLERANCE``, by the wrapper timers and by the trace alike;
``trace agrees with the timers``
    per point, variant and top-level phase taking at least ``MIN_SHARE`` of the profiled step,
    the trace's total over the profiled steps within ``TRACE_TOLERANCE`` of the wrapper timers'
    total over the same steps (one trace step per timed step; no ratio, and the check fails,
    where the counts differ). Smaller phases are listed, not held to it: a wrapped call costs the profiler about a
    microsecond of its own outside the frame the trace records, a sizeable share of a phase of
    a few microseconds (``encoder`` in decode);
``schedule saving matches the scheduler alone``
    where :func:`scheduler_only_point` ran, baseline - merged in the census's ``schedule`` phase
    within ``SCHED_TOLERANCE`` of the same difference in vLLM's scheduler driven alone
    (``labkit bench vllm-sched``'s mechanism, :mod:`labkit.vllm.sched_census`: a real
    ``Scheduler`` with real requests and a stand-in model runner), run in the same environment
    with the collector on as in the census.
"""

from __future__ import annotations

import statistics

__all__ = ["SUM_TOLERANCE", "TRACE_TOLERANCE", "MIN_SHARE", "SCHED_TOLERANCE", "census_checks",
           "scheduler_only_point", "TOP_PHASES"]

SUM_TOLERANCE = 0.05
TRACE_TOLERANCE = 0.10
MIN_SHARE = 0.02
SCHED_TOLERANCE = 0.20
TOP_PHASES = ("schedule", "prepare_inputs", "encoder", "forward", "sample", "update_from_output", "process_outputs")


def scheduler_only_point(requests: int, images: int, *, steps: int = 20, block: int = 5, warmup: int = 3,
                         variants=("baseline", "merged")) -> list[dict]:
    """``schedule()`` per decode step of vLLM's real scheduler alone, per A/B variant, in blocks.

    The mechanism of ``labkit bench vllm-sched`` (:mod:`labkit.vllm.sched_census`: a generated
    tiny Gemma-3 config, Gemma-style 258-token placeholders, a stand-in model runner) with the
    lab's A/B variants applied around each variant's steps, the collector on (as in the step
    census). As in the census, the variants alternate in blocks of ``block`` timed steps, each
    after one step left out: switching a variant clears the cumsums cached under the other
    definition (:func:`labkit.vllm.ab.apply_variant`), so the first step after a switch
    recomputes every image's cumsum, a cost neither arm pays in steady decode. ``warmup``
    steps per variant first, left out. Rows: ``variant``, ``num_requests``, ``images``,
    ``phase="scheduler_only"``, ``median_us``, ``steps``."""
    import gc

    from labkit.vllm.ab import patched_vllm
    from labkit.vllm.sched_census import SchedulerRun, _sizes, make_requests, make_scheduler, temporary_model_dir

    rounds = -(-steps // block)
    with temporary_model_dir() as model_dir:
        _prompt, blocks, max_len = _sizes(requests, images, warmup + rounds * (block + 1) + 2)
        runs = {v: SchedulerRun(make_scheduler(model_dir, num_blocks=blocks, max_model_len=max_len),
                                make_requests(requests, images, prefix=f"{v}-")) for v in variants}
        for v, run in runs.items():
            with patched_vllm(v):
                run.run_to_decode()
        gc.collect()
        times: dict[str, list[int]] = {v: [] for v in variants}

        def steady_step(v, run, i):
            sched_ns, _update_ns, out = run.step()
            if len(out.num_scheduled_tokens) != requests or out.scheduled_encoder_inputs:
                raise RuntimeError(f"{v}: scheduler-only step {i} is not a steady decode step of all {requests}")
            return sched_ns

        for v, run in runs.items():
            with patched_vllm(v):
                for i in range(warmup):
                    steady_step(v, run, i)
        for r in range(rounds):
            order = list(variants[r % len(variants):]) + list(variants[:r % len(variants)])
            for v in order:
                with patched_vllm(v):
                    steady_step(v, runs[v], 0)  # left out: it recomputes the cumsums the switch cleared
                    for i in range(block):
                        times[v].append(steady_step(v, runs[v], i + 1))
    return [{"variant": v, "num_requests": requests, "images": images, "phase": "scheduler_only", "parent": None,
             "median_us": statistics.median(times[v]) / 1e3, "steps": len(times[v]),
             "timer": "scheduler driven alone (labkit bench vllm-sched's mechanism)"} for v in variants]


def _index(rows) -> dict:
    return {(r["num_requests"], r["images"], r["variant"], r["phase"]): r for r in rows}


def census_checks(rows) -> list[dict]:
    """One record per check of the module text, for every point and variant the rows hold."""
    by = _index(rows)
    points = sorted({(r["num_requests"], r["images"]) for r in rows if r["phase"] == "step"})
    variants = list(dict.fromkeys(r["variant"] for r in rows if r["phase"] == "step"))
    out = []
    for n, m in points:
        for v in variants:
            step = by.get((n, m, v, "step"))
            if step is None:
                continue
            shares = [("wrapper", step.get("named_share")), ("trace", step.get("trace_named_share"))]
            ok = all(s is not None and s >= 1 - SUM_TOLERANCE for _, s in shares)
            out.append({"check": "phases add up", "num_requests": n, "images": m, "variant": v, "passed": ok,
                        "detail": ", ".join(f"{k} {100 * s:.1f}%" for k, s in shares if s is not None)
                        + f" of the step (at least {100 * (1 - SUM_TOLERANCE):.0f}%)"})
            held, loose = [], []
            prof_step = step.get("wrapper_profiled_median_us") or 0.0
            for p in TOP_PHASES + ("step",):
                r = by.get((n, m, v, p))
                ratio = None if r is None else r.get("trace_vs_wrapper")
                if ratio is None:
                    continue
                size = r.get("wrapper_profiled_median_us") or 0.0
                (held if p == "step" or size >= MIN_SHARE * prof_step else loose).append((p, ratio))
            bad = [(p, x) for p, x in held if abs(x - 1) > TRACE_TOLERANCE]
            out.append({"check": "trace agrees with the timers", "num_requests": n, "images": m, "variant": v,
                        "passed": bool(held) and not bad,
                        "detail": "trace / timers: " + ", ".join(f"{p} {x:.3f}" for p, x in held)
                        + (f"; below {100 * MIN_SHARE:.0f}% of the step, not held: "
                           + ", ".join(f"{p} {x:.3f}" for p, x in loose) if loose else "")})
        base, merged = by.get((n, m, "baseline", "schedule")), by.get((n, m, "merged", "schedule"))
        sb, sm = by.get((n, m, "baseline", "scheduler_only")), by.get((n, m, "merged", "scheduler_only"))
        if base and merged and sb and sm:
            census = base["median_us"] - merged["median_us"]
            alone = sb["median_us"] - sm["median_us"]
            rel = census / alone - 1 if alone > 0 else None
            out.append({"check": "schedule saving matches the scheduler alone", "num_requests": n, "images": m,
                        "variant": "baseline-merged", "passed": rel is not None and abs(rel) <= SCHED_TOLERANCE,
                        "census_us": census, "scheduler_only_us": alone,
                        "detail": f"baseline - merged schedule(): {census / 1e3:.3f} ms in the engine, "
                                  f"{alone / 1e3:.3f} ms in the scheduler alone"
                                  + (f" ({100 * rel:+.1f}%, tolerance {100 * SCHED_TOLERANCE:.0f}%)" if rel is not None
                                     else "")})
    return out
