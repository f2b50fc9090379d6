"""What the step census must show about itself, and the scheduler-only figure it is checked against.

More: docs/reference.md, ``labkit.vllm.census.step_checks``.
"""

from __future__ import annotations

import contextlib
import statistics
from typing import Sequence

from labkit.timing import nearest_rank, stopwatch

__all__ = ["PHASES", "TOP", "ALONE_MODES", "OFF_HOST", "step_quantiles", "SHARE_SLACK", "TRACE_TOLERANCE", "MIN_SHARE", "SCHED_TOLERANCE", "census_checks",
           "scheduler_only_point", "engine_scheduler_alone", "sweep_bytes", "TOP_PHASES", "alternate_blocks",
           "stand_in_scheduler", "STAND_IN_TIMER"]

#: every phase a row is written for: (phase, parent); top-level ones have no parent
PHASES = (("step", None), ("schedule", None), ("prepare_inputs", None), ("encoder", None), ("forward", None),
          ("sample", None), ("update_from_output", None), ("process_outputs", None), ("other", None),
          ("encoder_inputs", "schedule"), ("get_num_embeds", "encoder_inputs"), ("update_states", "prepare_inputs"),
          ("prepare_inputs_fn", "prepare_inputs"), ("attention_metadata", "prepare_inputs"),
          ("preprocess", "prepare_inputs"), ("model_forward", "forward"), ("logits", "forward"),
          ("sampler", "sample"), ("bookkeeping", "sample"), ("detokenize", "process_outputs"))
TOP = ("schedule", "prepare_inputs", "encoder", "forward", "sample", "update_from_output", "process_outputs")
#: the engine's own scheduler driven alone after a point's steps (:func:`labkit.vllm.census.step_checks.engine_scheduler_alone`):
#: row phase -> whether the last-level cache is swept between its steps
ALONE_MODES = {"schedule_alone": False, "schedule_alone_swept": True}
#: prefix of the phases of the steps timed with the forward off the host (:func:`labkit.vllm.census.step_census.forward_off_host`)
OFF_HOST = "off_host:"


def step_quantiles(values: Sequence[float]) -> dict:
    """``median_us`` and the nearest-rank ``p20_us`` / ``p80_us`` of per-step values (us)."""
    v = sorted(values)
    return {"median_us": float(statistics.median(v)), "p20_us": nearest_rank(v, 0.2), "p80_us": nearest_rank(v, 0.8)}


#: how far above 1 a step's named share may read: float rounding only (the timers nest exactly)
SHARE_SLACK = 1e-9
TRACE_TOLERANCE = 0.10
MIN_SHARE = 0.02
SCHED_TOLERANCE = 0.20
TOP_PHASES = ("schedule", "prepare_inputs", "encoder", "forward", "sample", "update_from_output", "process_outputs")


def alternate_blocks(steppers: dict, variants, *, rounds: int, block: int) -> dict:
    """Time A/B variants in alternating blocks: ``{(stepper name, variant): [ns per step]}``.

    ``steppers`` maps a name to ``step(variant) -> ns`` (None: it does not run that variant). Each
    round (the variants' order rotated each round), each variant is applied
    (:func:`labkit.vllm.ab.patched_vllm`) and every stepper in turn takes one step left out, then
    ``block`` timed steps: switching a variant clears the cumsums cached under the other definition
    on every live placeholder, so the first step after a switch recomputes them, a cost neither arm
    pays in steady decode. Steppers of one round run back to back, so they see the same machine."""
    from labkit.vllm.ab import patched_vllm

    variants = tuple(variants)
    times: dict = {(name, v): [] for name in steppers for v in variants}
    for r in range(rounds):
        for v in variants[r % len(variants):] + variants[:r % len(variants)]:
            with patched_vllm(v):
                for name, step in steppers.items():
                    if step(v) is None:  # else left out: it recomputes the cumsums the switch cleared
                        continue
                    times[(name, v)] += [step(v) for _ in range(block)]
    return {k: t for k, t in times.items() if t}


def _timed_rows(times: dict, requests: int, images: int, timers: dict) -> list[dict]:
    return [{"variant": v, "num_requests": requests, "images": images, "phase": name, "parent": None,
             **step_quantiles([ns / 1e3 for ns in t]), "steps": len(t), "timer": timers[name]}
            for (name, v), t in times.items()]


@contextlib.contextmanager
def stand_in_scheduler(requests: int, images: int, variants, decode_steps: int):
    """``labkit bench vllm-sched``'s stand-in at one shape: ``step(variant) -> ns`` of ``schedule()``.

    One real ``Scheduler`` per variant (:mod:`labkit.vllm.census.sched_census`: a generated tiny Gemma-3
    config, Gemma-style 258-token placeholders, a stand-in model runner), its requests brought to
    steady decode under that variant; each has room for ``decode_steps`` more steps. A step that
    is not a decode step of all ``requests`` raises ``RuntimeError``; a variant it was not made for
    gives None."""
    from labkit.vllm.ab import patched_vllm
    from labkit.vllm.census.sched_census import SchedulerRun, _sizes, make_requests, make_scheduler, temporary_model_dir

    with temporary_model_dir() as model_dir:
        _prompt, blocks, max_len = _sizes(requests, images, decode_steps)
        runs = {v: SchedulerRun(make_scheduler(model_dir, num_blocks=blocks, max_model_len=max_len),
                                make_requests(requests, images, prefix=f"{v}-")) for v in variants}
        for v, run in runs.items():
            with patched_vllm(v):
                run.run_to_decode()

        def step(v: str) -> int | None:
            if v not in runs:
                return None
            sched_ns, _update_ns, out = runs[v].step()
            if len(out.num_scheduled_tokens) != requests or out.scheduled_encoder_inputs:
                raise RuntimeError(f"{v}: a stand-in scheduler step is not a steady decode step of all {requests}")
            return sched_ns

        yield step


STAND_IN_TIMER = "scheduler driven alone (labkit bench vllm-sched's mechanism)"


def scheduler_only_point(requests: int, images: int, *, steps: int = 20, block: int = 5, warmup: int = 3,
                         variants=("baseline", "merged")) -> list[dict]:
    """``schedule()`` per decode step of vLLM's real scheduler alone, per A/B variant, in blocks.

    The mechanism of ``labkit bench vllm-sched`` (:func:`stand_in_scheduler`) with the lab's A/B
    variants applied around each variant's steps, the collector on (as in the step census),
    timed by :func:`alternate_blocks`. ``warmup`` steps per variant first, left out. Rows:
    ``variant``, ``num_requests``, ``images``, ``phase="scheduler_only"``, ``median_us``, ``steps``."""
    import gc

    from labkit.vllm.ab import patched_vllm

    rounds = -(-steps // block)
    with stand_in_scheduler(requests, images, variants, warmup + rounds * (block + 1) + 2) as step:
        gc.collect()
        for v in variants:
            with patched_vllm(v):
                for _ in range(warmup):
                    step(v)
        times = alternate_blocks({"scheduler_only": step}, variants, rounds=rounds, block=block)
    return _timed_rows(times, requests, images, {"scheduler_only": STAND_IN_TIMER})


def sweep_bytes(llc: int | None = None) -> int:
    """Bytes read between the swept steps of :func:`engine_scheduler_alone`: twice the last-level
    cache (``llc``, default :func:`labkit.device.last_level_cache_bytes`), within 64 MiB..2 GiB;
    256 MiB where the size is unknown."""
    from labkit.device import last_level_cache_bytes

    llc = last_level_cache_bytes() if llc is None else llc
    if not llc:
        return 256 * 2**20
    return min(2 * 2**30, max(64 * 2**20, 2 * int(llc)))


def _stand_in_output(req_ids: list, tokens: list):
    from vllm.v1.outputs import ModelRunnerOutput

    return ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                             sampled_token_ids=tokens)


def engine_scheduler_alone(scheduler, requests: int, images: int, variants, *, rounds: int, block: int,
                           sweep: int, stand_in=None, make_output=_stand_in_output) -> list[dict]:
    """``schedule()`` of the engine's own scheduler driven alone on its live decoding requests.

    Each step is ``schedule()`` (timed), then ``update_from_output`` with a stand-in for the
    model's output: every request samples its own last token again (a token that did not stop
    it before). Nothing else runs between steps, so the scheduler's data stays in the caches
    (``schedule_alone``); in the second mode ``sweep`` bytes are read between steps
    (``schedule_alone_swept``: the last-level cache swept, what the scheduler reads evicted).
    Each mode is timed by :func:`alternate_blocks` (``rounds`` rounds of ``block`` timed steps).
    ``stand_in`` (``step(variant) -> ns``, :func:`stand_in_scheduler`) is stepped in the same
    rounds as the back-to-back mode, block after block (rows ``scheduler_only``): the two
    schedulers alone compare on the same machine at the same time. The requests advance a token
    a step without the model runner, so the engine must not step again before they finish (the
    census aborts them). Every step must schedule one token for each of the ``requests`` and no
    encoder input (else ``RuntimeError``). Rows: ``variant``, ``num_requests``, ``images``,
    ``phase``, ``median_us``, ``p20_us``, ``p80_us``, ``steps``, ``timer``."""
    import numpy as np

    buf = np.ones(max(1, sweep // 8))  # float64: ``sweep`` bytes

    def stepper(swept: bool):
        def step(label: str) -> int:
            with stopwatch() as sw:
                out = scheduler.schedule()
            dt = sw.ns
            tokens = out.num_scheduled_tokens
            if len(tokens) != requests or any(k != 1 for k in tokens.values()) or out.scheduled_encoder_inputs:
                raise RuntimeError(f"{label}: a step of the scheduler alone is not a decode step of all {requests} "
                                   f"requests ({len(tokens)} scheduled)")
            ids = list(tokens)
            scheduler.update_from_output(out, make_output(ids, [[scheduler.requests[r].output_token_ids[-1]]
                                                                for r in ids]))
            if swept:
                buf.sum()  # reads every byte once: the next schedule() finds its data evicted
            return dt

        return step

    timers = {"scheduler_only": STAND_IN_TIMER + ", interleaved with the engine's scheduler alone"}
    rows = []
    for phase, swept in ALONE_MODES.items():
        timers[phase] = "the engine's scheduler driven alone" + (f", {sweep / 2**20:.0f} MiB read between steps"
                                                                 if swept else ", back to back")
        steppers = {phase: stepper(swept)}
        if stand_in is not None and not swept:
            steppers["scheduler_only"] = stand_in
        rows += _timed_rows(alternate_blocks(steppers, variants, rounds=rounds, block=block), requests, images,
                            timers)
    return rows


def census_checks(rows) -> list[dict]:
    """One record per check of the module text, for every point and variant the rows hold."""
    by = {(r["num_requests"], r["images"], r["variant"], r["phase"]): r for r in rows}
    points = sorted({(r["num_requests"], r["images"]) for r in rows if r["phase"] == "step"})
    variants = list(dict.fromkeys(r["variant"] for r in rows if r["phase"] == "step"))
    out = []
    for n, m in points:
        for v in variants:
            step = by.get((n, m, v, "step"))
            if step is None:
                continue
            out.append(_phases_add_up("phases add up", n, m, v, step))
            off = by.get((n, m, v, OFF_HOST + "step"))
            if off is not None:
                out.append(_phases_add_up("phases add up with the forward off the host", n, m, v, off))
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
        out += _saving_checks(by, n, m)
    return out


def _phases_add_up(check: str, n: int, m: int, v: str, step: dict) -> dict:
    """The ``phases add up`` checks of the module text on one ``step`` row."""
    share, top = step.get("named_share"), step.get("named_share_max")
    trace_top = step.get("trace_named_share_max", step.get("trace_named_share"))
    glue = None if share is None or not step.get("median_us") else (1 - share) * step["median_us"]
    above = [(k, x) for k, x in (("wrapper", top if top is not None else share), ("trace", trace_top))
             if x is not None]
    summed = step.get("named_phases")
    missing = [p for p in TOP_PHASES if summed is not None and p not in summed]
    extra = [p for p in (summed or ()) if p not in TOP_PHASES]
    ok = share is not None and all(x <= 1 + SHARE_SLACK for _, x in above) and not missing and not extra
    return {"check": check, "num_requests": n, "images": m, "variant": v, "passed": ok,
            "named_share": share, "named_share_max": top, "glue_us": glue,
            "detail": (f"named phases {100 * share:.1f}% of the step (median), " if share is not None else "")
            + "largest share of one step " + ", ".join(f"{k} {x:.4f}" for k, x in above) + " (at most 1)"
            + (f"; left out of the sum: {', '.join(missing)}" if missing else "")
            + (f"; summed but not a top-level call: {', '.join(extra)}" if extra else "")
            + ("; the record does not list the phases it summed" if summed is None else "")
            + (f"; glue {glue:.0f} us, not bounded (code outside every timer)" if glue is not None else "")}


def _saving(by, n, m, phase) -> float | None:
    b, g = by.get((n, m, "baseline", phase)), by.get((n, m, "merged", phase))
    return b["median_us"] - g["median_us"] if b and g else None


def _match(check: str, n: int, m: int, value: float, ref: float, figures: dict, text: str) -> dict:
    """A check that ``value`` lies within ``SCHED_TOLERANCE`` of ``ref`` (both us); ``text`` says what they are."""
    rel = value / ref - 1 if ref > 0 else None
    return {"check": check, "num_requests": n, "images": m, "variant": "baseline-merged",
            "passed": rel is not None and abs(rel) <= SCHED_TOLERANCE, **figures,
            "detail": text + (f" ({100 * rel:+.1f}%, tolerance {100 * SCHED_TOLERANCE:.0f}%)" if rel is not None else "")}


def _saving_checks(by, n, m) -> list[dict]:
    """The checks of the schedule saving at one point (see the module text), where their rows are recorded."""
    census, warm = _saving(by, n, m, "schedule"), _saving(by, n, m, "schedule_alone")
    cold, stand_in = _saving(by, n, m, "schedule_alone_swept"), _saving(by, n, m, "scheduler_only")
    off_host = _saving(by, n, m, OFF_HOST + "schedule")
    out = []
    if census is not None and stand_in is not None:
        out.append(_match("schedule saving matches the scheduler alone", n, m, census, stand_in,
                          {"census_us": census, "scheduler_only_us": stand_in},
                          f"baseline - merged schedule(): {census / 1e3:.3f} ms in the engine, "
                          f"{stand_in / 1e3:.3f} ms in the scheduler alone"))
    if off_host is not None and stand_in is not None:
        out.append(_match("schedule saving with the forward off the host matches the scheduler alone", n, m, off_host,
                          stand_in, {"off_host_us": off_host, "scheduler_only_us": stand_in},
                          f"baseline - merged schedule(): {off_host / 1e3:.3f} ms in the engine step with the forward "
                          f"off the host, {stand_in / 1e3:.3f} ms in the scheduler alone"))
    if off_host is not None and warm is not None:
        out.append(_match("schedule saving with the forward off the host matches the engine's scheduler alone", n, m,
                          off_host, warm, {"off_host_us": off_host, "alone_us": warm},
                          f"baseline - merged schedule(): {off_host / 1e3:.3f} ms in the engine step with the forward "
                          f"off the host, {warm / 1e3:.3f} ms in the engine's scheduler alone, back to back"))
    for v in dict.fromkeys(r[2] for r in by if r[:2] == (n, m)):
        in_step, alone, swept = (by.get((n, m, v, p)) for p in ("schedule", "schedule_alone", "schedule_alone_swept"))
        if in_step is None or alone is None or swept is None:
            continue
        x, lo, hi = in_step["median_us"], alone["median_us"], swept["median_us"]
        out.append({"check": "schedule() in the step lies between the scheduler alone, warm and swept",
                    "num_requests": n, "images": m, "variant": v, "passed": lo <= x <= hi, "census_us": x,
                    "alone_us": lo, "alone_swept_us": hi,
                    "detail": f"schedule(): {x / 1e3:.3f} ms in the engine step; the engine's scheduler alone "
                              f"{lo / 1e3:.3f} ms back to back, {hi / 1e3:.3f} ms with the cache swept between steps"
                              + (f" (baseline - merged: {census / 1e3:.3f} ms in the step, {warm / 1e3:.3f} and "
                                 f"{cold / 1e3:.3f} ms alone)" if None not in (census, warm, cold) else "")})
    if warm is not None and stand_in is not None:
        out.append(_match("the engine's scheduler alone matches the stand-in", n, m, warm, stand_in,
                          {"alone_us": warm, "scheduler_only_us": stand_in},
                          f"baseline - merged schedule(), back to back: {warm / 1e3:.3f} ms in the engine's "
                          f"scheduler, {stand_in / 1e3:.3f} ms in vllm-sched's stand-in"))
    return out
