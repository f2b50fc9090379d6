"""The answers of the pages read on a GPU: 02 (the engine's idle bubbles), 03 (#38794's copies),
04 (the prefix-LM attention kernel), 05 (the traces behind them)."""

from __future__ import annotations

from labkit.report.answers.element import Answer, bars_html, cite, esc, num, pct
from labkit.report.answers.pick import pick, recorded, row
from labkit.viz.tables import format_table

TENSOR, LIST = "tensor/loop/none/async", "list/loop/none/async"
PER_LAYER, PER_STEP = "fast/cursor/per_layer/async", "fast/cursor/per_step/async"


def _gpu(result) -> str:
    return (result.machine or {}).get("gpu_name") or result.slug


def idle_bubbles(results=None) -> Answer:
    """02: how host time becomes GPU idle in the lab's mini engine: the GPU's idle share before and
    after each PR, measured on a GPU where one recorded it (else the simulated engine)."""
    results = recorded(results)
    eng = pick(results, "engine", source="measured-gpu",
               where=lambda rows: row(rows, variant=TENSOR) and row(rows, variant=LIST))
    if eng is None:
        return Answer("No engine result recorded yet: run `labkit bench engine --size full`.")
    t, lst = row(eng.rows, variant=TENSOR), row(eng.rows, variant=LIST)
    where = f"on {esc(_gpu(eng))}" if eng.source == "measured-gpu" else "on the simulated GPU"
    text = (f"The lab's mini engine at #40143's shape {where} ({esc(eng.source)}, eager, every op launched from "
            f"Python): the GPU idles {pct(t['device_idle_frac'])} of the run with tensor placeholders and "
            f"{pct(lst['device_idle_frac'])} with list ones. Launched op by op every variant is host-bound, so the "
            f"step is the host's; under CUDA graphs the device becomes the longer side.")
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
    per_step, on a GPU where one recorded it; the GPU idle share from the profiled steps."""
    results = recorded(results)
    both = lambda rows: row(rows, variant="per_layer") and row(rows, variant="per_step")  # noqa: E731
    step = pick(results, "h2d_step", source="measured-gpu", where=both)
    if step is None:
        return Answer("No h2d_step result recorded yet: run `labkit bench h2d --size full`.")
    layers = min(r["layers"] for r in step.rows)
    pl, ps = row(step.rows, variant="per_layer", layers=layers), row(step.rows, variant="per_step", layers=layers)
    model = pl.get("model") or f"{layers} layers"
    text = (f"At 128 requests x 32 images with {esc(model)}'s {layers} layers ({esc(_gpu(step))}, {esc(step.source)}): "
            f"rebuilding the prefix ranges per layer makes {num(pl['h2d_per_step'])} host-to-device copies per step "
            f"({num(pl['sync_per_step'])} of them synchronous) and takes {num(pl['median_ns'] / 1e6, ' ms')} of host "
            f"time; once per step it is {num(ps['h2d_per_step'])} copy and {num(ps['median_ns'] / 1e6, ' ms')} "
            f"({num(pl['median_ns'] / ps['median_ns'], 'x')}).")
    sources = [cite(step)]
    idle = pick(results, "h2d_gpu_idle", where=both)
    if idle is not None:
        il, is_ = row(idle.rows, variant="per_layer", layers=layers), row(idle.rows, variant="per_step", layers=layers)
        if il and is_:
            text += (f" Under the profiler the GPU idles {pct(il['idle_fraction'])} of a per-layer step and "
                     f"{pct(is_['idle_fraction'])} of a per-step one.")
            sources.append(cite(idle))
    detail = bars_html([(r["variant"], r["median_ns"] / 1e6) for r in step.rows if r["layers"] == layers], "ms",
                       highlight=("per_layer",), caption=f"host time per decode step, {model}")
    return Answer(text, tuple(sources), detail)


ATTN_VARIANTS = ("triton_prefix", "flex_attention", "sdpa_mask")


def prefix_attention(results=None) -> Answer:
    """04: the lab's Triton prefix-LM attention kernel against FlexAttention and SDPA with a dense
    mask, per case, measured on a GPU."""
    results = recorded(results)
    res = pick(results, "attn_bench", source="measured-gpu",
               where=lambda rows: any(r.get("median_ms") is not None for r in rows))
    if res is None or res.source != "measured-gpu":
        return Answer("No GPU attention result recorded yet: the kernel's timings need a CUDA GPU "
                      "(`labkit bench attn --size full`); this page checks its numbers on the CPU.")
    cases = [c for c in dict.fromkeys(r["case"] for r in res.rows)]
    table = []
    for c in cases:
        rec = {"case": c}
        for v in ATTN_VARIANTS:
            r = row(res.rows, case=c, variant=v)
            rec[f"{v}_ms"] = r["median_ms"] if r else None
        if rec.get("triton_prefix_ms") and rec.get("sdpa_mask_ms"):
            rec["speedup_vs_sdpa"] = rec["sdpa_mask_ms"] / rec["triton_prefix_ms"]
        table.append(rec)
    main = max((t for t in table if t.get("speedup_vs_sdpa")), key=lambda t: t["speedup_vs_sdpa"], default=None)
    if main is None:
        return Answer("The recorded attention result has no triton_prefix / sdpa_mask pair.", (cite(res),))
    tr = row(res.rows, case=main["case"], variant="triton_prefix")
    text = (f"On {esc(_gpu(res))} ({esc(res.source)}, bf16), the lab's Triton prefix-LM kernel runs "
            f"{esc(main['case'])} in {num(main['triton_prefix_ms'], ' ms')}"
            + (f" ({num(tr['tflops'], ' TFLOPS')})" if tr.get("tflops") else "")
            + f" against {num(main['sdpa_mask_ms'], ' ms')} for SDPA with a dense mask "
              f"({num(main['speedup_vs_sdpa'], 'x')})"
            + (f" and {num(main['flex_attention_ms'], ' ms')} for FlexAttention" if main.get("flex_attention_ms") else "")
            + ", with the same output (largest difference "
            + num(max(r.get("max_abs_err") or 0 for r in res.rows)) + ").")
    detail = format_table(table, rename={"triton_prefix_ms": "triton prefix", "flex_attention_ms": "flex attention",
                                         "sdpa_mask_ms": "sdpa + mask"}, time_unit="ms")._repr_html_()
    return Answer(text, (cite(res),), detail)


def trace_analysis(analyses: dict) -> Answer:
    """05: what the recorded GPU traces of #38794 show per step: host-to-device copies and GPU idle,
    per_layer against per_step (``analyses``: ``{variant: Analysis}``, e.g.
    :func:`labkit.trace.analysis.notebook.lab_analyses`)."""
    before, after = analyses.get(PER_LAYER), analyses.get(PER_STEP)
    if before is None or after is None:
        return Answer("The per_layer / per_step traces of #38794 are not recorded: run `labkit bench engine "
                      "--trace-dir data/traces/<machine>` on a GPU.")

    def per_step(an, key):
        value = an.summary[key] / max(1, an.summary.get("steps_count") or 1)
        return int(value) if key.endswith("_count") and value == int(value) else value

    b, a = before.summary, after.summary
    gpu = before.source.get("gpu") or "the traced device"
    kind = before.source.get("kind") or "measured"
    share = lambda s: s["idle_us"] / (s["idle_us"] + s["busy_us"]) if s["idle_us"] + s["busy_us"] else 0.0  # noqa: E731
    text = (f"The mini engine's traces on {esc(gpu)} ({esc(kind)}): per-layer prefix ranges (before #38794) make "
            f"{num(per_step(before, 'h2d_count'))} host-to-device copies per step "
            f"({num(per_step(before, 'pageable_h2d_count'))} from pageable memory) against "
            f"{num(per_step(after, 'h2d_count'))} per step after; the GPU idles {num(per_step(before, 'idle_us') / 1e3, ' ms')} "
            f"per step ({pct(share(b))} of the traced time) against {num(per_step(after, 'idle_us') / 1e3, ' ms')} "
            f"({pct(share(a))}).")
    detail = format_table([
        {"per_step": "host-to-device copies", "per_layer": per_step(before, "h2d_count"), "per_step_": per_step(after, "h2d_count")},
        {"per_step": "GPU idle (ms)", "per_layer": per_step(before, "idle_us") / 1e3, "per_step_": per_step(after, "idle_us") / 1e3},
        {"per_step": "GPU busy (ms)", "per_layer": per_step(before, "busy_us") / 1e3, "per_step_": per_step(after, "busy_us") / 1e3},
    ], rename={"per_step": "per step", "per_layer": "per_layer (before)", "per_step_": "per_step (after)"})._repr_html_()
    files = tuple(f"{an.source.get('file')} ({kind}, {gpu})" for an in (before, after))
    return Answer(text, files, detail)
