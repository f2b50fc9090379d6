"""The answers of the pages that read vLLM itself: 07 (the next bubble, ``compute_mm_prefix_ranges``)
and 08 (#40143's published peaks predicted by the one step model)."""

from __future__ import annotations

from labkit.report.answers.element import Answer, cite, esc, num, pct
from labkit.facts import PR40143
from labkit.results import PR_TABLE, VLLM_PREFIX_RANGES, VLLM_STEP, find, find_all, results_rows
from labkit.viz.labels import bars_html


def next_bubble(rows: list[dict] | None = None, device_step_ms: float | None = None, step_from: str = "",
                point=(128, 32)) -> Answer:
    """07: installed vLLM's ``compute_mm_prefix_ranges`` against the patched one per step at ``point``
    (``vllm_prefix_ranges`` rows), and the GPU idle share each would leave with a ``device_step_ms``
    device step (perfect overlap bound)."""
    from labkit.vllm.census import bench_vllm_prefix_ranges

    if rows is None:
        rows = results_rows(find_all(VLLM_PREFIX_RANGES), params=("vllm_version",))
    rec = bench_vllm_prefix_ranges.lookup(rows, *point)
    if rec is None or "speedup" not in rec:
        return Answer(f"No vllm_prefix_ranges result at {point[0]} x {point[1]} recorded yet: run "
                      "`.venv-vllm/bin/labkit bench vllm-prefix-ranges --size full`.")
    if device_step_ms is None:
        device_step_ms, step_from = bench_vllm_prefix_ranges.device_step_ms()
    first = next(r for r in rows if r.get("machine") == rec["machine"])
    eff = bench_vllm_prefix_ranges.expected_effect(rec["installed_us"] / 1e3, rec["patched_us"] / 1e3, device_step_ms)
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


def inside_vllm_answer(results=None) -> Answer:
    """08: the one answer (:mod:`labkit.report.findings`), short: the census's saving per step, the
    after arm's peak predicted on each GPU against the published one, and the host it implies before."""
    from labkit.report.findings import census_saving

    pr = find(PR_TABLE, results=results, where=lambda rows: any(r.get("published") is not None for r in rows))
    census = find(VLLM_STEP, results=results,
                  where=lambda rows: any(str(r.get("phase")).startswith("off_host:") for r in rows))
    saving = census_saving(census) if census is not None else None
    if pr is None or saving is None:
        return Answer("No full pr_table and vllm_step results recorded yet: run `labkit bench vllm-step --size full` "
                      "in .venv-vllm-cpu and `labkit bench serve-sim`.")
    gpu, p = pr.params["gpu"], pr.params
    peak = {g: next(r for r in pr.rows if (r["arm"], r["gpu"], r["metric"]) == ("pr40143", g, "peak_output_tok_s"))
            for g in p["gpus"]}
    def tok(v) -> str:
        return f"<b>{v:,.0f}</b> tok/s"

    read = p["inferred"]["read_ns"]["value"] / 1e3
    g = next((r for r in pr.rows if (r["gpu"], r["metric"]) == (gpu, "gain_peak_output_tok_s")), None)
    opening = (f"On an {esc(gpu.upper())}, peak ratio {num(g['predicted'], 'x')} predicted, "
               f"{num(g['published'], 'x')} published; the whole-run gain "
               f"({num(PR40143.throughput_gain, 'x')} published) is not predicted. " if g and g["predicted"]
               else "This pr_table predates its gain rows. ")
    text = (f"{opening}#40143 cut {num(saving['saving_ms'], ' ms')} from vLLM's engine-core host step at 128 x 32. "
            f"After it the full-batch step is device-bound: peak {tok(peak[gpu]['predicted'])} predicted, "
            f"{tok(peak[gpu]['published'])} published, nothing fitted. Before it, host-bound: the PR host's "
            f"tensor read comes out at {num(read, ' us')}.")
    return Answer(text, (cite(census), cite(pr)))
