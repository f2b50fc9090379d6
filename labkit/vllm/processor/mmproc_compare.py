"""vLLM's own multimodal processor benchmark set beside ``labkit bench vllm-input``, stage by stage.

vLLM ships a benchmark of its multimodal input processing (``vllm.benchmarks.mm_processor``, the
code behind ``vllm bench mm-processor``). It runs ``LLM.chat`` on its random-mm dataset (base64
JPEG data URLs of uniform random pixels, as ``vllm bench serve`` sends them) with vLLM's
``enable_mm_processor_stats`` on, and reports, per request, the same ``TimingContext`` stage timers
``labkit bench vllm-input`` reads (``get_mm_hashes``, ``get_cache_missing_items``,
``apply_hf_processor``, ``merge_mm_kwargs``, ``apply_prompt_updates``, ``preprocessor_total``),
plus the encoder's forward time from the workers and each request's end-to-end latency (TTFT +
decode). Its figures are milliseconds per request (mean, median, std and the asked percentiles
over the requests); here they are divided by the images per request (fixed: the item-count range
ratio is 0) into microseconds per image, the lab's unit.

:data:`STAGE_MAP` pairs the stages; where a stage has no peer its row says why
(:data:`NO_PEER`): vLLM's benchmark decodes the JPEGs inside ``LLM.chat`` before any stage timer
starts and never times the decode; it times the HF processor only inside vLLM, and not
``add_request`` as a whole; the lab aborts each request after ``add_request``, so it has no
encoder or end-to-end figure.

:func:`compare` makes one row per model and stage: both figures (the median over rounds of each
round's median over requests, us per image), their ratio (vLLM's / the lab's) and a status:
``within`` (the two within :data:`TOLERANCE` of each other), ``within_spread`` (further apart,
but each side's request-to-request range, minimum to maximum over every round, overlaps the
other's), ``outside`` (apart and the ranges disjoint: the row states the difference in us per
image and as a share of the lab's ``preprocessor_total``), or ``no_peer``.
:func:`model_verdict` turns a model's rows into one sentence. Pure Python, no vLLM.
"""

from __future__ import annotations

import statistics

from labkit.errors import UsageError

__all__ = ["TOLERANCE", "STAGE_MAP", "NO_PEER", "vllm_figures", "lab_figures", "pool_rounds", "stage_status",
           "compare", "model_verdict"]

#: the largest relative difference (|vLLM / lab - 1|) read as the same figure
TOLERANCE = 0.15

#: (vLLM's benchmark stage, the lab's stage): None where the other side has no peer
STAGE_MAP = (
    ("get_mm_hashes", "get_mm_hashes"),
    ("get_cache_missing_items", "get_cache_missing_items"),
    ("apply_hf_processor", "apply_hf_processor"),
    ("merge_mm_kwargs", "merge_mm_kwargs"),
    ("apply_prompt_updates", "apply_prompt_updates"),
    ("preprocessor_total", "preprocessor_total"),
    ("encoder_forward", None),
    ("e2el", None),
    (None, "media_decode"),
    (None, "hf_processor"),
    (None, "add_request"),
    (None, "add_request_kernel"),
)

#: why a stage has no peer on the other side
NO_PEER = {
    "encoder_forward": "vLLM's benchmark runs each request through the engine (the encoder's forward, read from "
                       "the workers); the lab aborts each request after add_request",
    "e2el": "vLLM's benchmark's end-to-end latency per request (TTFT + decode, one output token); the lab "
            "aborts each request before its first step",
    "media_decode": "vLLM's benchmark decodes the base64 JPEGs inside LLM.chat, before any stage timer starts, "
                    "and does not time it",
    "hf_processor": "the HF processor called alone; vLLM's benchmark times it only inside vLLM "
                    "(apply_hf_processor)",
    "add_request": "the whole add_request call (tokenization, the stages, the hand-off to the engine core); "
                   "vLLM's benchmark times the stages only",
    "add_request_kernel": "the kernel's time inside add_request (getrusage); vLLM's benchmark does not read it",
}


def _figure(median: float, low: float, high: float, samples: int) -> dict:
    return {"median_us": float(median), "min_us": float(low), "max_us": float(high), "samples": int(samples)}


def _percentile(entry: dict, p: float) -> float:
    for key in (f"p{float(p)}", f"p{p}"):
        if key in entry:
            return entry[key]
    raise UsageError(f"vLLM's benchmark result lacks the p{p} percentile (run it with --metric-percentiles 0,100)")


def vllm_figures(bench: dict, images: int) -> dict:
    """Stage -> figure (us per image: median, min, max over the requests) of one run of vLLM's benchmark
    (its ``--output-json``, run with ``--metric-percentiles 0,100``), ``images`` images per request."""
    if images < 1:
        raise UsageError(f"images per request must be >= 1, got {images}")
    stats = bench.get("mm_processor_stats") or {}
    if not stats:
        raise UsageError("vLLM's benchmark recorded no multimodal processor stats")
    done = int(bench.get("completed", 0))
    out = {}
    for key, entry in stats.items():
        if not key.endswith("_ms"):
            continue  # num_encoder_calls: a count
        scale = 1e3 / images
        out[key[:-3]] = _figure(entry["median"] * scale, _percentile(entry, 0) * scale,
                                _percentile(entry, 100) * scale, done)
    pct = dict((float(p), v) for p, v in bench.get("percentiles_e2el_ms", []))
    if done and 0.0 in pct and 100.0 in pct:
        scale = 1e3 / images
        out["e2el"] = _figure(bench["median_e2el_ms"] * scale, pct[0.0] * scale, pct[100.0] * scale, done)
    return out


def lab_figures(rows) -> dict:
    """Stage -> figure of one run of the lab's input-processing rows (vllm-input's, processor cache kept)."""
    return {r["stage"]: _figure(r["per_image_median_us"], r["per_image_min_us"], r["per_image_max_us"],
                                r["samples"]) for r in rows}


def pool_rounds(rounds) -> dict:
    """Several rounds' figures of one side -> stage -> the median of the rounds' medians, the minimum and
    maximum over every round, each round's median (``rounds_us``) and the samples in all."""
    rounds = list(rounds)
    if not rounds:
        raise UsageError("no rounds to pool")
    out = {}
    for stage in rounds[0]:
        got = [r[stage] for r in rounds if stage in r]
        if len(got) != len(rounds):
            raise UsageError(f"stage {stage} is missing from some rounds")
        out[stage] = dict(_figure(statistics.median(g["median_us"] for g in got), min(g["min_us"] for g in got),
                                  max(g["max_us"] for g in got), sum(g["samples"] for g in got)),
                          rounds_us=[g["median_us"] for g in got])
    return out


def stage_status(vllm: dict, lab: dict, tolerance: float = TOLERANCE) -> tuple[str, float | None]:
    """``(status, ratio)`` of two figures of one stage (see the module text); ratio = vLLM's / the lab's."""
    if lab["median_us"] <= 0:
        return ("within" if vllm["median_us"] <= 0 else "outside"), None
    ratio = vllm["median_us"] / lab["median_us"]
    if abs(ratio - 1) <= tolerance:
        return "within", ratio
    overlap = vllm["min_us"] <= lab["max_us"] and lab["min_us"] <= vllm["max_us"]
    return ("within_spread" if overlap else "outside"), ratio


def _explain(stage: str, status: str, ratio, vllm: dict, lab: dict, total_us: float | None,
             tolerance: float) -> str:
    if status == "within":
        return f"within {100 * tolerance:.0f}% (vLLM / lab {ratio:.2f})" if ratio is not None else "both zero"
    how = f"vLLM's figure is {100 * abs(ratio - 1):.0f}% {'above' if ratio > 1 else 'below'} the lab's" \
        if ratio is not None else "the lab's figure is zero"
    ranges = (f"lab {lab['min_us']:.1f}-{lab['max_us']:.1f}, vLLM {vllm['min_us']:.1f}-{vllm['max_us']:.1f} us "
              f"per image")
    if status == "within_spread":
        return f"{how}, but the two request-to-request ranges overlap ({ranges})"
    diff = vllm["median_us"] - lab["median_us"]
    share = f", {100 * abs(diff) / total_us:.1f}% of the lab's preprocessor_total" if total_us else ""
    return f"{how} and the ranges are apart ({ranges}): {diff:+.1f} us per image{share}"


def compare(model: str, vllm: dict, lab: dict, *, tolerance: float = TOLERANCE) -> list[dict]:
    """One row per :data:`STAGE_MAP` entry for ``model`` from both sides' pooled figures (:func:`pool_rounds`)."""
    total = lab.get("preprocessor_total", {}).get("median_us")
    rows = []
    for v_stage, l_stage in STAGE_MAP:
        v = vllm.get(v_stage) if v_stage else None
        lb = lab.get(l_stage) if l_stage else None
        if v_stage and v is None:
            raise UsageError(f"{model}: vLLM's benchmark has no {v_stage} figure")
        if l_stage and lb is None:
            raise UsageError(f"{model}: the lab's run has no {l_stage} figure")
        row = {"model": model, "stage": v_stage or l_stage, "vllm_stage": v_stage, "lab_stage": l_stage,
               "vllm_us": v["median_us"] if v else None, "lab_us": lb["median_us"] if lb else None,
               "vllm_min_us": v["min_us"] if v else None, "vllm_max_us": v["max_us"] if v else None,
               "lab_min_us": lb["min_us"] if lb else None, "lab_max_us": lb["max_us"] if lb else None,
               "vllm_rounds_us": v.get("rounds_us") if v else None, "lab_rounds_us": lb.get("rounds_us") if lb else None,
               "ratio": None, "within_tolerance": None}
        if v and lb:
            status, ratio = stage_status(v, lb, tolerance)
            row.update(ratio=ratio, within_tolerance=status == "within", status=status,
                       note=_explain(row["stage"], status, ratio, v, lb, total, tolerance))
        else:
            row.update(status="no_peer", note=f"no peer: {NO_PEER[row['stage']]}")
        rows.append(row)
    return rows


def model_verdict(rows, tolerance: float = TOLERANCE) -> str:
    """One sentence for one model's rows of :func:`compare`: how many shared stages agree, and why the others
    do not (their rows' notes)."""
    rows = list(rows)
    models = {r["model"] for r in rows}
    if len(models) != 1:
        raise UsageError(f"model_verdict takes one model's rows, got {sorted(models) or 'none'}")
    shared = [r for r in rows if r["status"] != "no_peer"]
    if not shared:
        raise UsageError(f"{models.pop()}: no stage timed by both sides")
    apart = [r for r in shared if r["status"] != "within"]
    head = f"{rows[0]['model']}: "
    if not apart:
        return head + f"all {len(shared)} stages both sides time are within {100 * tolerance:.0f}% of each other."
    why = "; ".join(f"{r['stage']}: {r['note']}" for r in apart)
    return head + (f"{len(shared) - len(apart)} of {len(shared)} stages both sides time are within "
                   f"{100 * tolerance:.0f}% of each other; {why}.")
