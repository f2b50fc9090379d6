"""Where a simulated run's time went: the run's phases, the TTFT's parts, the scheduler's cost.

Phases of the run (each step in one, in this order of precedence):

``mixed prefill+decode``
    the step carries prefill tokens (admission: a prompt and its images go in);
``decode, admission open``
    decode only, while some requests are still in the API server's input processing;
``pure decode``
    every request is in the engine and none has finished;
``tail``
    some requests have finished.

Per phase: steps, simulated seconds, the mean step, device and engine-core host (ms), the share
of steps the host bounds. TTFT splits into the wait for the API server (inputs done: queueing
behind earlier requests' inputs plus its own) and the rest (the engine's queue, the prefill
steps, the output job). Pure Python.
"""

from __future__ import annotations

import statistics

from labkit.serve.clock import Timeline

__all__ = ["RUN_PHASES", "phase_of", "phase_rows", "ttft_parts", "scheduler_cost_rows", "requests_buckets"]

RUN_PHASES = ("mixed prefill+decode", "decode, admission open", "pure decode", "tail")


def phase_of(step, total_requests: int, all_admitted_ns: float) -> str:
    if step.prefill_tokens > 0:
        return RUN_PHASES[0]
    if step.start_ns < all_admitted_ns:
        return RUN_PHASES[1]
    if step.finished_before == 0:
        return RUN_PHASES[2]
    return RUN_PHASES[3]


def phase_rows(tl: Timeline) -> list[dict]:
    """One row per run phase (see the module text); times in s and ms."""
    n = len(tl.handover_ns)
    all_in = max(t for t in tl.handover_ns if t is not None) if n else 0.0
    groups: dict = {p: [] for p in RUN_PHASES}
    for s in tl.steps:
        groups[phase_of(s, n, all_in)].append(s)
    rows = []
    for p, steps in groups.items():
        if not steps:
            rows.append({"phase": p, "steps": 0, "wall_s": 0.0})
            continue
        span = [s.end_ns - s.start_ns for s in steps]
        rows.append({"phase": p, "steps": len(steps), "wall_s": sum(span) / 1e9,
                     "first_start_s": steps[0].start_ns / 1e9, "last_end_s": steps[-1].end_ns / 1e9,
                     "mean_step_ms": statistics.fmean(span) / 1e6,
                     "mean_device_ms": statistics.fmean(s.device_ns for s in steps) / 1e6,
                     "mean_core_host_ms": statistics.fmean(s.core_host_ns for s in steps) / 1e6,
                     "host_bound_frac": sum(s.host_bound for s in steps) / len(steps),
                     "mean_decode_requests": statistics.fmean(s.decode_requests for s in steps)})
    idle = 0.0
    prev = 0.0
    for s in tl.steps:
        idle += max(0.0, s.start_ns - prev)
        prev = s.end_ns
    rows.append({"phase": "engine idle (no request in the engine)", "steps": 0, "wall_s": idle / 1e9})
    return rows


def ttft_parts(tl: Timeline) -> dict:
    """Mean TTFT (s, from each request's start) and its parts: waiting for the API server's inputs
    (from the start to the handover), and after the handover."""
    done = [i for i, ts in enumerate(tl.token_ns) if ts]
    if not done:
        return {"mean_ttft_s": 0.0, "mean_input_wait_s": 0.0, "mean_after_handover_s": 0.0}
    start = tl.starts_ns()
    ttft = statistics.fmean(tl.token_ns[i][0] - start[i] for i in done) / 1e9
    wait = statistics.fmean(tl.handover_ns[i] - start[i] for i in done) / 1e9
    return {"mean_ttft_s": ttft, "mean_input_wait_s": wait, "mean_after_handover_s": ttft - wait,
            "input_wait_share": wait / ttft if ttft > 0 else 0.0,
            "api_thread_inputs_s": tl.api_busy_inputs_ns / 1e9, "api_thread_outputs_s": tl.api_busy_outputs_ns / 1e9}


def requests_buckets(points: list[int]) -> list[tuple[int, int]]:
    """``[(lo, hi)]`` request-count ranges ending at the census's points: 1, 2-8, 9-32, 33-128 ..."""
    out, lo = [], 1
    for p in sorted(set(points)):
        if p >= lo:
            out.append((lo, p))
            lo = p + 1
    out.append((lo, 1 << 30))
    return out


def _q(values: list[float], p: float) -> float:
    v = sorted(values)
    return float(v[min(len(v) - 1, int(round(p * (len(v) - 1))))])


def scheduler_cost_rows(timings: list[dict], buckets: list[tuple[int, int]], census=None) -> list[dict]:
    """The real scheduler's measured calls per step shape (decode or mixed, requests range):
    median, p20, p80 ns of ``schedule()`` and ``update_from_output()`` (wall clock, and the
    thread's CPU time as ``*_cpu_*`` where measured), with the census's
    ``schedule`` (scaled) at the range's top point beside them when ``census`` is given."""
    rows = []
    for kind in ("decode", "mixed"):
        for lo, hi in buckets:
            sel = [t for t in timings if lo <= t["requests"] <= hi and ((t["prefill_tokens"] > 0) == (kind == "mixed"))]
            if not sel:
                continue
            row = {"shape": kind, "requests": f"{lo}-{hi}" if hi < 1 << 30 else f">={lo}", "steps": len(sel)}
            for key in ("schedule_ns", "update_ns", "schedule_cpu_ns", "update_cpu_ns"):
                if key not in sel[0]:
                    continue
                vals = [float(t[key]) for t in sel]
                row.update({f"{key[:-3]}_median_ns": _q(vals, 0.5), f"{key[:-3]}_p20_ns": _q(vals, 0.2),
                            f"{key[:-3]}_p80_ns": _q(vals, 0.8)})
            if census is not None and hi < 1 << 30:
                row["census_schedule_ns"] = census.phase_ns("schedule", hi) / census.cpu_speed  # this CPU
                row["census_variant"] = census.variant
            rows.append(row)
    return rows
