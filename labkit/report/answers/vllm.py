"""The answers of the pages that read vLLM itself: 07 (the next bubble, ``compute_mm_prefix_ranges``)
and 08 (the serving simulator against the published numbers, else the step census)."""

from __future__ import annotations

from labkit.report.answers.element import Answer, bars_html, cite, esc, num, pct
from labkit.report.answers.pick import pick, recorded
from labkit.viz.tables import format_table

SERVE_SIM = "serve_sim"


def next_bubble(rows: list[dict] | None = None, device_step_ms: float | None = None, step_from: str = "",
                point=(128, 32)) -> Answer:
    """07: installed vLLM's ``compute_mm_prefix_ranges`` against the patched one per step at ``point``
    (``vllm_prefix_ranges`` rows), and the GPU idle share each would leave with a ``device_step_ms``
    device step (perfect overlap bound)."""
    from labkit.vllm.census import nextbubble

    if rows is None:
        rows = nextbubble.recorded_rows()
    if device_step_ms is None:
        device_step_ms, step_from = nextbubble.published_device_step_ms()
    rec = nextbubble.lookup(rows, *point)
    if rec is None or "speedup" not in rec:
        return Answer(f"No vllm_prefix_ranges result at {point[0]} x {point[1]} recorded yet: run "
                      "`.venv-vllm/bin/labkit bench vllm-ranges --size full`.")
    first = next(r for r in rows if r.get("machine") == rec["machine"])
    eff = nextbubble.expected_effect(rec["installed_us"] / 1e3, rec["patched_us"] / 1e3, device_step_ms)
    text = (f"Recorded on {esc(rec['machine'])} (vLLM {esc(first.get('vllm_version'))}) at {point[0]} requests x "
            f"{point[1]} images: installed <code>compute_mm_prefix_ranges</code> takes "
            f"{num(rec['installed_us'] / 1e3, ' ms')} of host time per step, patched "
            f"{num(rec['patched_us'] / 1e3, ' ms')} ({num(rec['speedup'], 'x')}). Beside a "
            f"{num(device_step_ms, ' ms')} device step the GPU would idle "
            f"{pct(eff['gpu_idle_fraction_installed_overlapped'])} of an installed step and "
            f"{pct(eff['gpu_idle_fraction_patched_overlapped'])} of a patched one (perfect-overlap bound).")
    detail = bars_html([("installed", rec["installed_us"] / 1e3), ("patched", rec["patched_us"] / 1e3),
                        ("device step", device_step_ms)], "ms", highlight=("installed",),
                       caption="host time per step against the device step")
    sources = (f"vllm_prefix_ranges recorded on {rec['machine']} ({first.get('source')}); "
               f"device step: {step_from or 'published'}",)
    return Answer(text, sources, detail)


def _serve_sim_answer(res) -> Answer:
    """The named GPU's before/after output tok/s ratio against the published one, then the absolute
    times' misses, all read from the ``serve_sim`` rows."""
    from labkit.serve.bench import ABSOLUTE_METRICS, before_after, compared_rows, named_gpu

    gpu = named_gpu(res)
    rows = compared_rows(res, gpu)
    ratio = next((r for r in rows if r.get("kind") == "ratio"), None)
    fitted = res.params.get("fitted") or {}
    text = (f"vLLM's real scheduler, driven over #40143's whole run on a simulated {esc(gpu or 'GPU')} "
            f"({esc(res.source)}; host from {esc(res.slug)}'s census, "
            + (f"fitted: {esc(', '.join(fitted))}" if fitted else "nothing fitted") + ")")
    if ratio is not None:
        text += (f", predicts the before/after output tok/s ratio {num(ratio['predicted'], 'x')} against the "
                 f"published {num(ratio['published'], 'x')} (error {pct(ratio['error'])}).")
    else:
        text += "."
    misses, under = [], []
    for metric, label, scale, unit in ABSOLUTE_METRICS:
        pair, unit = before_after(rows, metric), " " + unit
        if pair:
            b, a = pair
            under += [b["predicted"] < b["published"], a["predicted"] < a["published"]]
            misses.append(f"{label} {num(b['predicted'] * scale, unit)} / {num(a['predicted'] * scale, unit)} "
                          f"against {num(b['published'] * scale, unit)} / {num(a['published'] * scale, unit)}")
    if misses:
        text += (" The absolute times " + ("are shorter than published on both arms" if all(under) else "miss")
                 + " (baseline / pr40143: " + "; ".join(misses) + ")"
                 + ("; the ratio holds within 10%, the run's length does not." if ratio is not None
                    and abs(ratio["error"]) <= 0.10 else "."))
    spread = before_after(rows, "finish_spread_s")
    if spread:
        b, a = spread
        text += (f" The published table also fixes how close together the requests finished: its duration less "
                 f"the mean E2E latency (mean TTFT + the other tokens x mean TPOT) is {num(b['published'], ' s')} / "
                 f"{num(a['published'], ' s')}, the simulated run's {num(b['predicted'], ' s')} / "
                 f"{num(a['predicted'], ' s')}")
        text += (": the PR's requests decoded side by side, the simulated ones start decoding as the API server "
                 "hands them over, one after another." if b["predicted"] > 2 * b["published"] else ".")
        text += _client_bound_clause(res, gpu, min(b["published"], a["published"]))
    detail = format_table(rows, columns=["arm", "gpu", "metric", "predicted", "published", "error"])._repr_html_()
    return Answer(text, (cite(res),), detail)


def client_start_bound(res, gpu: str | None, spread_s: float) -> dict | None:
    """What a finish spread says of the client: duration - mean E2EL = mean(duration - each end) +
    mean(each start), so the mean start delay, ``(N - 1) / 2`` body serializations when the client
    serializes them one after another, is at most the spread. ``{"serialize_s", "mean_start_s",
    "bound_s"}``: the simulated run's serialization per request, the mean start delay it gives, and
    the longest serialization the spread allows; None where the run has no measured intake."""
    per = ((res.params.get("per_gpu") or {}).get(gpu) or {}).get("intake_ns_per_request") or {}
    n = (res.params.get("workload") or {}).get("requests")
    if not per.get("client_serialize") or not n or n < 2 or spread_s is None:
        return None
    d = per["client_serialize"] / 1e9
    return {"serialize_s": d, "mean_start_s": (n - 1) / 2 * d, "bound_s": spread_s / ((n - 1) / 2)}


def _client_bound_clause(res, gpu, spread_s) -> str:
    b = client_start_bound(res, gpu, spread_s)
    if b is None:
        return ""
    text = (f" That spread also bounds the client, which serializes the request bodies one after another and "
            f"starts each request's clock before its own: the mean start delay cannot exceed it. This CPU's "
            f"serialization of a body, scaled to the GPU node's host, is {num(b['serialize_s'] * 1e3, ' ms')}, a mean "
            f"start delay of {num(b['mean_start_s'], ' s')}")
    if b["mean_start_s"] > spread_s:
        text += (f", more than the published spread allows: the PR's client took at most "
                 f"{num(b['bound_s'] * 1e3, ' ms')} per body, faster than the calibration's CPU-speed factor "
                 f"predicts for this work.")
    else:
        text += "."
    return text


def _handover_sentence(ho) -> str:
    """What the real server's handovers (``vllm_handover``) say of the simulator's one-after-another API server."""
    s = ho.params.get("summary") or {}
    h, ref = s.get("handover"), s.get("one_after_another")
    if not h or not ref:
        return ""
    return (f"In a real vllm serve ({esc(ho.slug)}, {s['requests']} requests x {ho.params.get('images_per_request')} "
            f"images sent at once) the first request reached the engine at {pct(h['first_frac'])} of the last "
            f"handover's time, not the {pct(ref['first_frac'])} one after another would give, and the mean at "
            f"{pct(h['mean_frac'])} (one after another: {pct(ref['mean_frac'])})." + _gil_clause(s))


def _gil_clause(summary: dict) -> str:
    """`` Its API server held the GIL 0.6 s per request, 51% of it for HTTP body in.`` where profiled."""
    stages = (summary.get("gil") or {}).get("stages") or {}
    held = [(name, v) for name, v in stages.items() if v.get("per_request_s") is not None and v.get("share")]
    if not held:
        return ""
    top, v = max(held, key=lambda kv: kv[1]["share"])
    total = sum(x["per_request_s"] for _, x in held)
    return (f" Its API server held the GIL {num(total, ' s')} per request (py-spy), {pct(v['share'])} of it for "
            f"{esc(top)}: work no second core shares.")


def _host_fit_sentence(fit) -> str:
    """The run with one host time per request per step fitted to pr40143's published mean TPOT
    (``serve_sim_host_per_request``): the host it needed, and the baseline's TPOT and the ratio it
    then predicts."""
    from labkit.serve.bench import before_after, compared_rows

    ns = (fit.params.get("fitted") or {}).get("host_per_request_ns")
    rows = compared_rows(fit)
    ratio = next((r for r in rows if r.get("kind") == "ratio"), None)
    pair = before_after(rows, "mean_tpot_ms")
    if ns is None or ratio is None or pair is None:
        return ""
    base = pair[0]
    requests = (fit.params.get("workload") or {}).get("requests") or 0
    text = (f"Fitting instead one host time per request per step, added to the engine core's chain in both arms "
            f"({num(ns / 1e3, ' us')}, {num(ns * requests / 1e6, ' ms')} a step at {requests} requests), the "
            f"baseline's mean TPOT is {num(base['predicted'], ' ms')} against the published "
            f"{num(base['published'], ' ms')} and the ratio {num(ratio['predicted'], 'x')} against "
            f"{num(ratio['published'], 'x')}")
    if abs(base["error"]) <= 0.10:
        text += (": with both arms host-bound, a host step longer than the census's by that much in both arms "
                 "gives both published TPOTs; what that host is, the census on this CPU does not hold.")
    else:
        text += "."
    return text


def _serve_host_sentence(sh) -> str:
    """What a real vllm serve paid beside each decode step (``vllm_serve_host``), at its largest point."""
    got: dict = {}
    for r in sh.rows:
        if r.get("kind") == "per_step":
            v = r["median_ns"] if r.get("median_ns") is not None else r.get("mean_ns")
            got[(r["phase"], r["requests"])] = v
    if not got:
        return ""
    n = max(k[1] for k in got)
    io = sum(got.get((p, n)) or 0.0 for p in ("engine_output_thread", "engine_input_thread"))
    api, client = got.get(("api_server_outputs", n)), got.get(("client", n))
    if api is None:
        return ""
    text = (f"Beside each decode step a real vllm serve ({esc(sh.slug)}, {n} streams) paid "
            f"{num(io / 1e6, ' ms')} in the engine core's I/O threads and {num(api / 1e6, ' ms')} in the API "
            f"server ({num(api / 1e3 / n, ' us')} per stream)")
    if client is not None:
        text += f", its client {num(client / 1e6, ' ms')}"
    return text + "; the simulation adds both, at the GPU node's CPU speed."


def _device_fit_sentence(fit) -> str:
    """The run with the device time fitted to pr40143's published TPOT: the factor, the ratio it then
    predicts and the baseline's TPOT against the published, read from ``serve_sim_device_scale``."""
    from labkit.serve.bench import before_after, compared_rows

    factor = (fit.params.get("fitted") or {}).get("device_scale")
    rows = compared_rows(fit)
    ratio = next((r for r in rows if r.get("kind") == "ratio"), None)
    pair = before_after(rows, "mean_tpot_ms")
    if factor is None or ratio is None or pair is None:
        return ""
    base = pair[0]
    text = (f"With the device time fitted to pr40143's published mean TPOT (x {num(factor)}, the one fitted "
            f"parameter), the ratio is {num(ratio['predicted'], 'x')} and the baseline's mean TPOT "
            f"{num(base['predicted'], ' ms')} against the published {num(base['published'], ' ms')}")
    if ratio["error"] < -0.10 and base["predicted"] < base["published"]:
        text += (": under vLLM's async scheduling as simulated (a step lasts the longer of the device and the "
                 "host), the baseline's measured host hides behind the PR's device step, so the published gain "
                 "needs host time that the step does not overlap.")
    else:
        text += "."
    return text


def _census_answer(censuses: list) -> Answer:
    from labkit.viz.vllm import inside_vllm

    if not censuses:
        return Answer(inside_vllm.NO_STEP)
    census = next((c for c in censuses if "schedule_alone" in inside_vllm._savings(c)), censuses[0])
    savings = inside_vllm._savings(census)
    points = sorted(savings.get("schedule", {}), key=lambda p: p[0] * p[1])
    if not points:
        return Answer("The recorded census has no baseline / merged pair: " + inside_vllm.NO_STEP, (cite(census),))
    point = (128, 32) if (128, 32) in points else points[-1]
    step = savings["schedule"][point]
    by = {(r["variant"], r["phase"]): r.get("median_us") for r in census.rows
          if (r["num_requests"], r["images"]) == point}
    whole = (by.get(("baseline", "step")) or 0) - (by.get(("merged", "step")) or 0)
    text = (f"In vLLM's real engine step (CPU build, {esc(census.slug)}, {esc(census.source)}) at {point[0]} requests x "
            f"{point[1]} images, the pre-#40143 scheduler loop costs {num(step / 1e3, ' ms')} of "
            f"<code>schedule()</code> per decode step (baseline - merged)")
    if whole > 0:
        text += f" of a {num(whole / 1e3, ' ms')} step saving"
    text += "."
    alone = savings.get("schedule_alone", {}).get(point) or savings.get("scheduler_only", {}).get(point)
    if alone:
        what = "the engine's scheduler driven alone" if savings.get("schedule_alone", {}).get(point) else "the stand-in scheduler alone"
        text += (f" Inside the step it saves {num(step / alone, 'x')} what {what} saves back to back "
                 f"({num(alone / 1e3, ' ms')}): the rest of the step evicts the scheduler's data from the caches "
                 f"between two <code>schedule()</code> calls")
        swept = savings.get("schedule_alone_swept", {}).get(point)
        text += (f" (with the last-level cache swept between its steps, the scheduler alone saves "
                 f"{num(swept / 1e3, ' ms')})." if swept else ".")
    items = [(label, savings[phase][point] / 1e3) for phase, label, _ in inside_vllm.SAVINGS
             if point in savings.get(phase, {})]
    detail = bars_html(items, "ms", log=False, highlight=("inside the engine step (census)",),
                       caption=f"schedule() saving, baseline - merged, {point[0]} x {point[1]}")
    return Answer(text, (cite(census),), detail)


def inside_vllm_answer(results=None, censuses: list | None = None) -> Answer:
    """08: the serving simulator's predicted-vs-published table (``serve_sim`` result) where one is
    recorded; otherwise the step census's finding (the schedule saving inside a step and alone)."""
    results = recorded(results)
    sim = pick(results, SERVE_SIM, where=lambda rows: all(k in rows[0] for k in ("predicted", "published")))
    if sim is not None:
        answer = _serve_sim_answer(sim)
        fit = pick(results, SERVE_SIM + "_device_scale", machine=sim.slug,
                   where=lambda rows: all(k in rows[0] for k in ("predicted", "published")))
        if fit is not None:
            answer = Answer(answer.text + " " + _device_fit_sentence(fit), answer.sources + (cite(fit),), answer.detail)
        hfit = pick(results, SERVE_SIM + "_host_per_request", machine=sim.slug,
                    where=lambda rows: all(k in rows[0] for k in ("predicted", "published")))
        if hfit is not None and _host_fit_sentence(hfit):
            answer = Answer(answer.text + " " + _host_fit_sentence(hfit), answer.sources + (cite(hfit),),
                            answer.detail)
        sh = pick(results, "vllm_serve_host", machine=sim.slug, where=lambda rows: "phase" in rows[0])
        if sh is not None and _serve_host_sentence(sh):
            answer = Answer(answer.text + " " + _serve_host_sentence(sh), answer.sources + (cite(sh),), answer.detail)
        ho = pick(results, "vllm_handover", where=lambda rows: "api_send_s" in rows[0])
        if ho is not None and _handover_sentence(ho):
            answer = Answer(answer.text + " " + _handover_sentence(ho), answer.sources + (cite(ho),), answer.detail)
        return answer
    if censuses is None:
        from labkit.viz.vllm import inside_vllm

        censuses = inside_vllm.recorded_censuses()
    return _census_answer(censuses)
