"""Notebook 08's "what each choice of the simulator moves": the host-fitted serving runs side by side.

Each run of ``labkit bench serve-sim --fit host-per-request`` fits the same one parameter (a host
time per request per step, to pr40143's published TPOT) and differs from the others in two of the
model's choices, each recorded in the result's parameters:

- the API server's handover shape (``params.api_server.order``): ``media-first``, what the real
  server's handovers show, or ``side-by-side``, a bound with every request handed over near the
  end of the whole intake (what the published finish spread asks for);
- what ``schedule()`` is charged (``params.scheduler_host_cost``): ``measured``, its own calls in
  the run (vLLM's scheduler alone between the simulator's steps), or ``census``, its cost inside
  vLLM's real engine step with the forward off the host (the rest of the step evicts its data).

- :func:`recorded_choices`: the recorded runs of that grid, one machine's, in grid order;
- :func:`choices_table`: one row per run: the two choices, the fitted host, each compared metric's
  error against the published (both arms) and the finish spreads;
- :func:`choices_text`: what moving each choice does, read from the runs.
"""

from __future__ import annotations

__all__ = ["ORDERS", "SCHEDULERS", "GRID", "NO_CHOICES", "recorded_choices", "choices_table", "choices_text"]

ORDERS = ("media-first", "side-by-side")
SCHEDULERS = ("measured", "census")
#: (API order, scheduler cost), in the order the table shows them
GRID = tuple((o, s) for s in SCHEDULERS for o in ORDERS)
NO_CHOICES = ("no host-fitted serve_sim run recorded: run `.venv-vllm-cpu/bin/labkit bench serve-sim --size full "
              "--fit host-per-request` (with --api-order side-by-side and/or --scheduler-host census for the others)")
_SCHEDULER_WORDS = {"measured": "alone in the run", "census": "inside vLLM's step (census)"}
_METRICS = (("output_throughput_ratio", "ratio"), ("mean_tpot_ms", "TPOT"), ("mean_ttft_ms", "TTFT"),
            ("duration_s", "duration"), ("finish_spread_s", "finish spread"))


def _choices(result) -> tuple[str, str]:
    p = result.params
    return (p.get("api_server") or {}).get("order", "media-first"), p.get("scheduler_host_cost", "measured")


def recorded_choices(root=None, machine: str | None = None) -> list:
    """The recorded host-fitted runs of :data:`GRID` (a full run before a quick one), all of one
    machine (``machine``, else the one holding the most of them, this machine on a tie), in grid
    order; runs whose recorded choices are not those their name says are left out."""
    from labkit.device import describe_machine
    from labkit.results import load_results
    from labkit.serve.bench import result_name

    here = describe_machine("cpu")["slug"]
    by_machine: dict = {}
    for order, sched in GRID:
        for r in sorted(load_results(root, name=result_name("host-per-request", order, sched)),
                        key=lambda r: r.size != "full"):
            if _choices(r) == (order, sched):
                by_machine.setdefault(r.slug, {}).setdefault((order, sched), r)
    if not by_machine:
        return []
    slug = machine if machine is not None else max(by_machine, key=lambda s: (len(by_machine[s]), s == here))
    got = by_machine.get(slug, {})
    return [got[k] for k in GRID if k in got]


def _compared(result) -> dict:
    """``{(metric, arm): row}`` of the named GPU's compared rows (``arm`` ``ratio`` for the ratio)."""
    from labkit.serve.bench import compared_rows

    out = {}
    for r in compared_rows(result):
        if r.get("kind") == "ratio":
            out[(r["metric"], "ratio")] = r
        elif r.get("kind") == "metric":
            out[(r["metric"], r["arm"])] = r
    return out


def choices_table(results):
    """One row per run: ``handover shape``, ``schedule() charged``, ``fitted us/request``, then per
    metric and arm the predicted value with its error against the published (``fitted`` for the
    fitted one), and the finish spreads (simulated / published, s)."""
    import pandas as pd

    cols = ["handover shape", "schedule() charged", "fitted us/request", "ratio", "baseline TPOT ms",
            "baseline TTFT s", "pr40143 TTFT s", "baseline duration s", "pr40143 duration s", "finish spread s"]
    rows = []
    for res in results:
        order, sched = _choices(res)
        got = _compared(res)
        ns = (res.params.get("fitted") or {}).get("host_per_request_ns")

        def cell(metric, arm, scale=1.0):
            r = got.get((metric, arm))
            if r is None or r.get("predicted") is None:
                return "-"
            err = "fitted" if r.get("fitted") else ("" if r.get("error") is None else f"{r['error']:+.1%}")
            return f"{r['predicted'] * scale:.3g} ({err})" if err else f"{r['predicted'] * scale:.3g}"

        spread = [got.get(("finish_spread_s", a)) for a in ("baseline", "pr40143")]
        spread_cell = ("-" if any(s is None for s in spread) else
                       f"{spread[0]['predicted']:.3g} / {spread[1]['predicted']:.3g} "
                       f"(published {spread[0]['published']:.3g} / {spread[1]['published']:.3g})")
        rows.append((order, _SCHEDULER_WORDS.get(sched, sched), None if ns is None else ns / 1e3,
                     cell("output_throughput_ratio", "ratio"), cell("mean_tpot_ms", "baseline"),
                     cell("mean_ttft_ms", "baseline", 1e-3), cell("mean_ttft_ms", "pr40143", 1e-3),
                     cell("duration_s", "baseline"), cell("duration_s", "pr40143"), spread_cell))
    return pd.DataFrame(rows, columns=cols)


def _value(res, metric: str, arm: str):
    r = _compared(res).get((metric, arm))
    return None if r is None else r.get("predicted")


def _published(res, metric: str, arm: str):
    r = _compared(res).get((metric, arm))
    return None if r is None else r.get("published")


def _pair(by: dict, pairs, *metrics):
    """For the first pair of choices ``(a, b)`` both recorded, ``([(values a, b), published] per metric
    ..., a)``; each metric ``(name, arm)``; None when no pair has every value."""
    for a, b in pairs:
        if a not in by or b not in by:
            continue
        out = []
        for metric, arm in metrics:
            vals = [_value(by[k], metric, arm) for k in (a, b)]
            pub = _published(by[a], metric, arm)
            if None in vals or pub is None:
                break
            out.append((vals, pub))
        else:
            return (*out, a)
    return None


def choices_text(results) -> str:
    """What moving each choice does, from the runs that differ in that choice alone: the scheduler's
    cost against the baseline's TPOT and the ratio, the handover shape against the mean TTFT and the
    finish spread; then what no run gives (the arms' TTFT difference)."""
    if not results:
        return NO_CHOICES
    by = {_choices(r): r for r in results}
    parts = []
    got = _pair(by, [((o, "measured"), (o, "census")) for o in ORDERS],
                ("mean_tpot_ms", "baseline"), ("output_throughput_ratio", "ratio"))
    if got is not None:
        (tp, pub_tp), (ra, pub_ra), (order, _) = got
        between = min(tp) <= pub_tp <= max(tp) and min(ra) <= pub_ra <= max(ra)
        parts.append(f"Charging schedule() its cost inside vLLM's step instead of its cost alone in the run ({order} "
                     f"handovers) moves the baseline's mean TPOT from {tp[0]:.1f} to {tp[1]:.1f} ms and the ratio "
                     f"from {ra[0]:.3f}x to {ra[1]:.3f}x (published {pub_tp:.2f} ms, {pub_ra:.3f}x)"
                     + (": the two measured costs of the pre-#40143 loop bracket the published baseline."
                        if between else "."))
    got = _pair(by, [(("media-first", c), ("side-by-side", c)) for c in SCHEDULERS],
                ("mean_ttft_ms", "baseline"), ("finish_spread_s", "baseline"))
    if got is not None:
        (tt, pub_tt), (fs, pub_fs), _ = got
        parts.append(f"Handing every request over near the end of the intake (side-by-side, a bound: vLLM's "
                     f"processor runs on one worker) instead of media-first moves the baseline's mean TTFT from "
                     f"{tt[0] / 1e3:.1f} to {tt[1] / 1e3:.1f} s (published {pub_tt / 1e3:.1f} s) and its finish spread "
                     f"from {fs[0]:.1f} to {fs[1]:.1f} s (published {pub_fs:.2f} s)"
                     + (": even with every request handed over at the end, the intake is shorter than the published "
                        "TTFT asks for." if tt[1] < pub_tt * 0.9 else "."))
    gaps = []
    for r in results:
        b, a = _value(r, "mean_ttft_ms", "baseline"), _value(r, "mean_ttft_ms", "pr40143")
        pb, pa = _published(r, "mean_ttft_ms", "baseline"), _published(r, "mean_ttft_ms", "pr40143")
        if None not in (b, a, pb, pa):
            gaps.append((abs(b - a) / 1e3, (pb - pa) / 1e3))
    if gaps:
        most = max(g for g, _ in gaps)
        pub = gaps[0][1]
        if most < abs(pub) / 2:
            parts.append(f"No run gives the arms' TTFT difference: the published one is {pub:.1f} s, the runs' at most "
                         f"{most:.1f} s. The arms differ only in the engine core's scheduler, so either the PR's "
                         f"first tokens waited on the engine (in every simulated run they wait on the API server) or "
                         f"the difference is the two runs' noise, which one published run per arm cannot tell.")
    return " ".join(parts) if parts else "The recorded runs differ in more than one choice at a time."
