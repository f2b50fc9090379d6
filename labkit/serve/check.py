"""serve-sim checked against vLLM's own server on this machine (result ``serve_sim_check``).

For each run ``vllm_serve_timeline`` holds (shape x arm), the clock is given only what that run
measured: the intake stages per request (its API server's timers), the engine core's host per step
(``schedule`` + ``update_from_output`` and the loop's gap to the next step, against the requests in
the step) and the CPU forward as the device (the rest of each step, against its prefill tokens,
encoder inputs and decode requests; least squares over the run's own steps), with vLLM's real
scheduler at the run's settings and synchronous scheduling (the CPU build's). What it predicts is
what ``vllm bench serve`` reported: mean TTFT, the spread of the requests' finishes, mean TPOT,
duration, output tok/s and the peak second.

More: docs/reference.md, ``labkit.serve.check``.
"""

from __future__ import annotations

import statistics
import tempfile
from itertools import accumulate

from labkit.errors import UsageError
from labkit.serve.api_server import Intake
from labkit.serve.clock import simulate
from labkit.serve.metrics import compute_metrics
from labkit.vllm.census.sched_census import write_model_config
from labkit.vllm.conformance.models import placeholder_layout
from labkit.vllm.serving import (ServeConfig, ServeWorkload, VllmDriver, kv_blocks_for, make_serving_scheduler,
                                  make_vllm_requests, prompt_layout)

__all__ = ["CHECK_METRICS", "TOLERANCE", "measured_metrics", "run_costs", "check_rows"]

#: what ``vllm bench serve`` reports that the check predicts (unit)
CHECK_METRICS = {"mean_ttft_s": "s", "finish_spread_s": "s", "mean_tpot_ms": "ms", "duration_s": "s",
                 "output_tok_s": "tok/s", "peak_output_tok_s": "tok/s"}
TOLERANCE = 0.15
#: each step's device cost is linear in these (the CPU forward: prefill tokens, images encoded, decodes)
DEVICE_TERMS = ("ctx_tokens", "encoder_inputs", "gen_requests")


def peak_range(token_s: list) -> list:
    """The peak second (most token arrivals in one of ``vllm bench serve``'s one-second buckets) for
    buckets cut at each twentieth of a second: ``[least, most]``. A run whose fastest stretch is
    shorter than a second has a peak that depends on where the buckets fall."""
    got = []
    for k in range(20):
        counts: dict = {}
        for ts in token_s:
            for t in ts:
                counts[int(t + k / 20)] = counts.get(int(t + k / 20), 0) + 1
        got.append(max(counts.values()))
    return [min(got), max(got)]


def first_request_margin(first_token_s: float, finish_s: float, steps: list) -> dict:
    """The request that got its first token first: how many prefill steps (those scheduling prompt
    tokens) the engine ran after that token and until it finished. When the others' prefills
    outlast its output, it finishes while they still prefill, seconds before the rest."""
    after = [s for s in steps if s[0] >= first_token_s]
    return {"prefill_steps_after_first_token": sum(1 for s in after if s[1]),
            "steps_to_finish": sum(1 for s in after if s[0] < finish_s)}


def _metrics(token_s: list, prompt_len: int) -> dict:
    m = compute_metrics(token_s, [prompt_len] * len(token_s))
    finishes = [ts[-1] for ts in token_s if ts]
    return {"mean_ttft_s": m.mean_ttft_ms / 1e3, "finish_spread_s": max(finishes) - min(finishes),
            "mean_tpot_ms": m.mean_tpot_ms, "duration_s": m.duration_s, "output_tok_s": m.output_throughput,
            "peak_output_tok_s": m.max_output_tokens_per_s}


def measured_metrics(requests: list[dict], reported: dict) -> dict:
    """The run's figures as ``vllm bench serve`` reported them, and the spread of its requests' finishes."""
    missing = [k for k in ("mean_ttft_ms", "mean_tpot_ms", "duration", "output_throughput", "max_output_tokens_per_s")
               if not isinstance(reported.get(k), (int, float))]
    if missing or not requests:
        raise UsageError(f"the server timeline keeps no {', '.join(missing) or 'requests'} of a run: ingest it again")
    finishes = [r["finish_s"] for r in requests]
    return {"mean_ttft_s": reported["mean_ttft_ms"] / 1e3, "finish_spread_s": max(finishes) - min(finishes),
            "mean_tpot_ms": reported["mean_tpot_ms"], "duration_s": reported["duration"],
            "output_tok_s": reported["output_throughput"], "peak_output_tok_s": reported["max_output_tokens_per_s"]}


def _lstsq(xs: list[list[float]], ys: list[float]) -> list[float]:
    import numpy as np

    coef, *_ = np.linalg.lstsq(np.array(xs, dtype=float), np.array(ys, dtype=float), rcond=None)
    return [float(c) for c in coef]


def run_costs(intake: list[dict], steps: list[dict], media_threads: int) -> dict:
    """What one server run measured, as the clock takes it (ns): the :class:`Intake` stages (each
    body's arrival: its handler's start; the event loop's body work: the last handler's start over
    the requests, where a request has no arrival of its own; the pool's per worker and
    image: its workers x the span from its first image's start to its last one's end / the images; the processor's, each call as it ran: one call's stall holds up every request after), the host per step (intercept + one cost per request
    in the step), the device per step (intercept + one cost per :data:`DEVICE_TERMS`, from the
    steps after the last handover, or from every step where fewer than three of those prefill) and
    how much longer the device took while the intake still worked (the median ratio of those
    steps' device time to that model's; 1 where the model is fitted on every step)."""
    if not intake or len(steps) < 4 or any("start_s" not in s for s in steps):
        raise UsageError("the run has no intake timers or step clock: record it with scripts/vllm_ab.sh --timeline")
    parse = max(r["handler_s"] for r in intake) / len(intake)
    images = sum(r.get("images") or 0 for r in intake)
    span = max(r.get("media_end_s", 0.0) for r in intake) - min(r.get("media_start_s", 1e18) for r in intake)
    image = media_threads * span / images if images else 0.0
    each = [r["processor_end_s"] - r["processor_start_s"] for r in sorted(intake, key=lambda r: r["processor_start_s"])]
    steps = sorted(steps, key=lambda s: s["start_s"])
    gaps = [b["start_s"] - a["end_s"] for a, b in zip(steps, steps[1:])] + [0.0]
    host = [s["host_ms"] / 1e3 + g for s, g in zip(steps, gaps)]
    device = [s["end_s"] - s["start_s"] - s["host_ms"] / 1e3 for s in steps]
    terms = [[1.0] + [float(s[k]) for k in DEVICE_TERMS] for s in steps]
    last = max(r["handover_s"] for r in intake)
    free = [i for i, s in enumerate(steps) if s["start_s"] >= last]
    if sum(steps[i]["ctx_tokens"] > 0 for i in free) < 3:  # the intake outlasted the prefills: one fit for all
        free = list(range(len(steps)))
    dev = _lstsq([terms[i] for i in free], [device[i] for i in free])
    busy = [device[i] / model for i in range(len(steps)) if i not in free
            and (model := sum(c * x for c, x in zip(dev, terms[i]))) > 0]
    hst = _lstsq([[1.0, float(s["ctx_requests"] + s["gen_requests"])] for s in steps], host)
    return {"encoder_budget": max(s["encoder_tokens"] for s in steps),
            "intake": Intake(parse * 1e9, image * 1e9, statistics.fmean(each) * 1e9, intake[0]["images"],
                             media_threads, tuple(t * 1e9 for t in each), tuple(sorted(r["handler_s"] * 1e9 for r in intake))),
            "device_ns": dict(zip(("base",) + DEVICE_TERMS, (c * 1e9 for c in dev))),
            "intake_slows_device": statistics.median(busy) if busy else 1.0,
            "host_ns": {"base": hst[0] * 1e9, "per_request": hst[1] * 1e9}}


class _RunHost:
    def __init__(self, host_ns: dict) -> None:
        self.h = host_ns

    def core_ns(self, shape) -> float:
        return max(0.0, self.h["base"] + self.h["per_request"] * shape.num_requests)

    def frontend_ns(self, outputs: int) -> float:
        return 0.0  # the API server's outputs run beside the engine core (its own process)


def _device_fn(device_ns: dict):
    def device(shape) -> float:
        x = {"ctx_tokens": shape.prefill_tokens, "encoder_inputs": shape.images_encoded,
             "gen_requests": len(shape.decode_context_lens)}
        return max(0.0, device_ns["base"] + sum(device_ns[k] * x[k] for k in DEVICE_TERMS))
    return device


def _simulate(arm: str, workload: ServeWorkload, costs: dict, settings: dict, model_dir) -> dict:
    from labkit.vllm.ab import patched_vllm

    prompt_len, spans = prompt_layout(workload)
    config = ServeConfig(max_num_batched_tokens=int(settings.get("max_num_batched_tokens", 2048)),
                         max_num_seqs=workload.requests, async_scheduling=False,
                         num_blocks=kv_blocks_for(workload.requests, prompt_len, workload.output_tokens),
                         max_item_tokens=spans[0].length if spans else 1, encoder_budget=costs["encoder_budget"])
    with patched_vllm(arm):
        driver = VllmDriver(make_serving_scheduler(model_dir, config), make_vllm_requests(workload, prefix=f"{arm}-"),
                            async_scheduling=False)
        tl = simulate(driver, requests=workload.requests, intake=costs["intake"], host=_RunHost(costs["host_ns"]),
                      device=_device_fn(costs["device_ns"]), regime="sync",
                      intake_slows_device=costs["intake_slows_device"])
    token_s = [[t / 1e9 for t in ts] for ts in tl.token_ns]
    first = min(range(len(token_s)), key=lambda i: token_s[i][0])
    margin = first_request_margin(token_s[first][0], token_s[first][-1],
                                  [(s.start_ns / 1e9, s.prefill_tokens > 0) for s in tl.steps])
    return {**_metrics(token_s, prompt_len), "peak_range": peak_range(token_s), "first_request": margin}


def check_rows(doc: dict) -> tuple[list[dict], dict]:
    """Rows (shape, arm, metric, unit, measured, predicted, error) for every run of a
    ``vllm_serve_timeline`` result, and each run's costs as the clock took them (needs vLLM)."""
    runs: dict = {}
    for r in doc.get("rows", []):
        key = (r.get("num_prompts"), r.get("images"), r.get("image_size"), r.get("output_len"), r.get("variant"))
        runs.setdefault(key, {"request": [], "intake": [], "step": []}).setdefault(r.get("kind"), []).append(r)
    settings = (doc.get("params") or {}).get("engine_settings") or {}
    threads = int((doc.get("params") or {}).get("media_threads") or 8)
    rows, used = [], {}
    with tempfile.TemporaryDirectory(prefix="labkit-serve-check-") as tmp:
        model_dir = write_model_config(tmp)
        for (n, images, size, out_len, arm), got in sorted(runs.items(), key=lambda kv: str(kv[0])):
            if not got["intake"]:
                continue  # recorded before the server's timers
            h, w = (int(x) for x in str(size).split("x"))
            prompt_len = round(sum(s["ctx_tokens"] for s in got["step"]) / n)
            layout = placeholder_layout("gemma4", w, h)
            workload = ServeWorkload("server-run", n, images, h, w, prompt_len - images * layout.length, out_len, n)
            costs = run_costs(got["intake"], got["step"], threads)
            label = f"{arm}/{n}x{images}x{size}/out{out_len}/"
            run_settings = next((v for k, v in settings.items() if k.startswith(label)), {})
            reported = next((v for k, v in ((doc.get("params") or {}).get("reported") or {}).items()
                             if k.startswith(label)), {})
            predicted = _simulate(arm, workload.check(), costs, run_settings, model_dir)
            measured = measured_metrics(got["request"], reported)
            chunks = [list(accumulate([r["first_token_s"]] + [x / 1e3 for x in r["itl_ms"]])) for r in got["request"]]
            first = min(got["request"], key=lambda r: r["first_token_s"])
            first_margin = first_request_margin(first["first_token_s"], first["finish_s"],
                                                [(s["start_s"], s["ctx_tokens"] > 0) for s in got["step"]])
            shape = f"{n}x{images}x{size}/out{out_len}"
            used[f"{arm}/{shape}"] = {"intake_ns": vars(costs["intake"]), "device_ns": costs["device_ns"],
                                      "host_ns": costs["host_ns"], "prompt_tokens": prompt_len,
                                      "intake_slows_device": costs["intake_slows_device"],
                                      "encoder_budget": costs["encoder_budget"],
                                      "first_request": {"measured": first_margin, "predicted": predicted["first_request"]},
                                      "peak_range": {"measured": peak_range(chunks), "predicted": predicted["peak_range"]}}
            for metric, unit in CHECK_METRICS.items():
                m, p = measured[metric], predicted[metric]
                rows.append({"shape": shape, "arm": arm, "metric": metric, "unit": unit, "measured": m,
                             "predicted": p, "error": (p - m) / m if m else None})
    if not rows:
        raise UsageError("the server timeline holds no run with the intake timers: record one with "
                         "scripts/vllm_ab.sh --timeline")
    return rows, used
