"""The answers of the pages read on a GPU: 02 (the engine's idle bubbles), 03 (#38794's copies),
04 (the prefix-LM attention kernel), 05 (the traces behind them)."""

from __future__ import annotations

from labkit.report.answers.element import Answer, cite, esc, num, pct, row
from labkit.results import ATTN_BENCH, ENGINE, H2D_GPU_IDLE, H2D_STEP, find
from labkit.viz.labels import bars_html

TENSOR, LIST = "tensor/loop/none/async", "list/loop/none/async"
PER_LAYER, PER_STEP = "fast/cursor/per_layer/async", "fast/cursor/per_step/async"


def _gpu(result) -> str:
    return (result.machine or {}).get("gpu_name") or result.slug


def idle_bubbles(results=None) -> Answer:
    """02: how host time becomes GPU idle in the lab's mini engine: the GPU's idle share before and
    after each PR, measured on a GPU where one recorded it (else the simulated engine)."""
    eng = find(ENGINE, source="measured-gpu", results=results,
               where=lambda rows: row(rows, variant=TENSOR) and row(rows, variant=LIST))
    if eng is None:
        return Answer("No engine result recorded yet: run `labkit bench engine --size full`.")
    t, lst = row(eng.rows, variant=TENSOR), row(eng.rows, variant=LIST)
    where = f"on {esc(_gpu(eng))}" if eng.source == "measured-gpu" else "on the simulated GPU"
    text = (f"The lab's mini engine at #40143's shape {where} ({esc(eng.source)}, eager): the GPU idles "
            f"{pct(t['device_idle_frac'])} of the run with tensor placeholders, {pct(lst['device_idle_frac'])} with "
            f"list ones. Op by op every variant is host-bound; under CUDA graphs the device becomes the longer side.")
    pl, ps = row(eng.rows, variant=PER_LAYER), row(eng.rows, variant=PER_STEP)
    if pl and ps and pl.get("device_idle_frac") is not None and ps.get("device_idle_frac") is not None:
        text += (f" #38794: {pct(pl['device_idle_frac'])} idle with per-layer prefix ranges, "
                 f"{pct(ps['device_idle_frac'])} with one copy per step.")
    detail = bars_html([(r["variant"], 100 * r["device_idle_frac"]) for r in eng.rows
                        if r.get("device_idle_frac") is not None], "% idle", log=False,
                       highlight=(TENSOR, PER_LAYER), caption=f"GPU idle share of the run, {_gpu(eng)}")
    return Answer(text, (cite(eng),), detail)


def h2d_prefix_ranges(results=None) -> Answer:
    """03: host time and host-to-device copies per decode step, per_layer (before #38794) against
    per_step, as recorded on a GPU where one recorded it; the GPU idle share from the profiled steps."""
    both = lambda rows: row(rows, variant="per_layer") and row(rows, variant="per_step")  # noqa: E731
    step = find(H2D_STEP, source="measured-gpu", where=both, results=results)
    if step is None:
        return Answer("No h2d_step result recorded yet: run `labkit bench h2d --size full`.")
    layers = min(r["layers"] for r in step.rows)
    pl, ps = row(step.rows, variant="per_layer", layers=layers), row(step.rows, variant="per_step", layers=layers)
    model = pl.get("model") or f"{layers} layers"
    text = (f"Recorded on {esc(_gpu(step))} at 128 requests x 32 images, {esc(model)}'s {layers} layers: building the "
            f"prefix ranges in every layer makes {num(pl['h2d_per_step'])} host-to-device copies per step "
            f"({num(pl['sync_per_step'])} synchronous) and {num(pl['median_ns'] / 1e6, ' ms')} of host time; once per "
            f"step, {num(ps['h2d_per_step'])} copy and {num(ps['median_ns'] / 1e6, ' ms')} "
            f"({num(pl['median_ns'] / ps['median_ns'], 'x')}).")
    cited = [step]
    idle = find(H2D_GPU_IDLE, machine=step.slug, where=both, results=results)
    il = is_ = None
    if idle is not None:
        il, is_ = row(idle.rows, variant="per_layer", layers=layers), row(idle.rows, variant="per_step", layers=layers)
    if il and is_:
        text += (f" Profiled, the GPU idles {pct(il['idle_fraction'])} of a per-layer step and "
                 f"{pct(is_['idle_fraction'])} of a per-step one.")
        cited.append(idle)
    detail = bars_html([(r["variant"], r["median_ns"] / 1e6) for r in step.rows if r["layers"] == layers], "ms",
                       highlight=("per_layer",), caption=f"host time per decode step, {model}")
    return Answer(text, (cite(*cited),), detail)


ATTN_VARIANTS = ("triton_prefix", "flex_attention", "sdpa_mask")


def attention_table(rows: list[dict]) -> list[dict]:
    """Per case of ``attn_bench`` rows: each variant's median ms, the kernel's TFLOP/s, its speed-up
    over SDPA with a dense mask, and the largest difference of any variant from the reference (the
    tile-shape sweep's rows left out)."""
    table = []
    for c in dict.fromkeys(r["case"] for r in rows):
        rec = {"case": c, **{f"{v}_ms": (row(rows, case=c, variant=v) or {}).get("median_ms") for v in ATTN_VARIANTS}}
        kernel = row(rows, case=c, variant="triton_prefix") or {}
        rec["triton_prefix_tflops"] = kernel.get("tflops")
        if rec.get("triton_prefix_ms") and rec.get("sdpa_mask_ms"):
            rec["speedup_vs_sdpa"] = rec["sdpa_mask_ms"] / rec["triton_prefix_ms"]
        errors = [r["max_abs_err"] for r in rows if r["case"] == c and r["variant"] in ATTN_VARIANTS
                  and r.get("max_abs_err") is not None]
        rec["max_abs_err"] = max(errors, default=None)
        table.append(rec)
    return table


ATTN_HEADERS = {"triton_prefix_ms": "triton prefix", "flex_attention_ms": "flex attention", "sdpa_mask_ms": "sdpa + mask",
                "triton_prefix_tflops": "triton prefix TFLOP/s", "max_abs_err": "largest difference"}


def prefix_attention(results=None) -> Answer:
    """04: the lab's Triton prefix-LM attention kernel against FlexAttention and SDPA with a dense
    mask, in the case where it gains most, as recorded on a GPU."""
    res = find(ATTN_BENCH, source="measured-gpu", results=results,
               where=lambda rows: any(r.get("median_ms") is not None for r in rows))
    if res is None or res.source != "measured-gpu":
        return Answer("No GPU attention result recorded yet: the kernel's timings need a CUDA GPU "
                      "(`labkit bench attn --size full`); this page checks its numbers on the CPU.")
    table = attention_table(res.rows)
    main = max((t for t in table if t.get("speedup_vs_sdpa")), key=lambda t: t["speedup_vs_sdpa"], default=None)
    if main is None:
        return Answer("The recorded attention result has no triton_prefix / sdpa_mask pair.", (cite(res),))
    text = (f"Recorded on {esc(_gpu(res))} ({esc(res.size)} size, bf16): the lab's Triton prefix-LM kernel runs "
            f"{esc(main['case'].replace('_', ' '))} in {num(main['triton_prefix_ms'], ' ms')}"
            + (f" ({num(main['triton_prefix_tflops'], ' TFLOP/s')})" if main.get("triton_prefix_tflops") else "")
            + f" against {num(main['sdpa_mask_ms'], ' ms')} for SDPA with a dense mask "
              f"({num(main['speedup_vs_sdpa'], 'x')})"
            + (f" and {num(main['flex_attention_ms'], ' ms')} for FlexAttention" if main.get("flex_attention_ms") else "")
            + f"; every output matches the reference within {num(max(t['max_abs_err'] or 0 for t in table))}.")
    detail = bars_html([(v.replace("_", " "), main.get(f"{v}_ms")) for v in ATTN_VARIANTS], "ms",
                       highlight=("triton prefix",), caption=f"{main['case'].replace('_', ' ')}, median per call")
    return Answer(text, (cite(res),), detail)


def trace_per_step(analyses: dict) -> list[dict]:
    """Per step of the recorded #38794 traces, before (per_layer) and after (per_step): host-to-device
    copies, pageable ones, GPU idle and busy ms and the idle share (``analyses``: ``{variant: Trace}``,
    e.g. :func:`labkit.viz.trace_notebook.lab_analyses`); empty when either trace is missing."""
    before, after = analyses.get(PER_LAYER), analyses.get(PER_STEP)
    if before is None or after is None:
        return []

    def per_step(an, key):
        value = an.summary()[key] / max(1, an.summary()["steps_count"] or 1)
        return int(value) if key.endswith("_count") and value == int(value) else value

    def share(an):
        s = an.summary()
        return s["idle_us"] / (s["idle_us"] + s["busy_us"]) if s["idle_us"] + s["busy_us"] else 0.0

    return [{"per step": what, "per_layer (before)": get(before), "per_step (after)": get(after)} for what, get in (
        ("host-to-device copies", lambda an: per_step(an, "h2d_count")),
        ("from pageable memory", lambda an: per_step(an, "pageable_h2d_count")),
        ("GPU idle (ms)", lambda an: per_step(an, "idle_us") / 1e3),
        ("GPU busy (ms)", lambda an: per_step(an, "busy_us") / 1e3),
        ("GPU idle (% of the traced time)", lambda an: 100 * share(an)))]


def trace_analysis(analyses: dict) -> Answer:
    """05: what the recorded GPU traces of #38794 show per step: host-to-device copies and GPU idle,
    per_layer against per_step (``analyses``: ``{variant: Trace}``; see :func:`trace_per_step`)."""
    table = trace_per_step(analyses)
    if not table:
        return Answer("The per_layer / per_step traces of #38794 are not recorded: run `labkit bench engine "
                      "--trace-dir data/traces/<machine>` on a GPU.")
    before = analyses[PER_LAYER]
    copies, pageable, idle, _, share = ((r["per_layer (before)"], r["per_step (after)"]) for r in table)
    gpu = before.source().get("gpu") or "the traced device"
    text = (f"The mini engine's traces on {esc(gpu)} ({esc(before.source().get('kind') or 'measured')}): per-layer "
            f"prefix ranges (before #38794) make {num(copies[0])} host-to-device copies per step "
            f"({num(pageable[0])} from pageable memory) against {num(copies[1])} after; the GPU idles "
            f"{num(idle[0], ' ms')} per step ({num(share[0])}% of the traced time) against "
            f"{num(idle[1], ' ms')} ({num(share[1])}%).")
    detail = bars_html([("per_layer (before)", idle[0]), ("per_step (after)", idle[1])], "ms",
                       highlight=("per_layer (before)",), caption="GPU idle per step, from the traces")
    return Answer(text, (f"the profiler traces of the per_layer and per_step runs ({before.source().get('kind')}, {gpu})",),
                  detail)
