"""Figures for the next bubble: vLLM's per-step ``compute_mm_prefix_ranges``, installed vs patched.

All functions take ``vllm_prefix_ranges`` rows (``results_rows(..., params=("vllm_version",))``) and return a
``go.Figure`` (never shown here). Host times measured on a CPU say so in the title.
"""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.vllm.census.bench_vllm_prefix_ranges import side_by_side
from labkit.viz.labels import no_result

COLOURS = {"installed": "#c0392b", "patched": "#2471a3"}


def _sources(rows) -> str:
    parts = sorted({f"{r.get('source', '?')} on {r.get('machine', '?')}, vLLM {r.get('vllm_version', '?')}" for r in rows})
    return "; ".join(parts)


def plot_profile(profile_rows: list[dict], aten_ops: dict[str, int] | None = None) -> go.Figure:
    """Horizontal bars: own time (ms) of the top functions in one 128 x 32 call (cProfile)."""
    title = "Where one compute_mm_prefix_ranges call spends its time (128 requests x 32 images)"
    if not profile_rows:
        return no_result("no profile recorded yet: run `.venv-vllm/bin/labkit bench vllm-prefix-ranges --profile`", title, height=300)
    rows = [r for r in profile_rows if r["tottime_us"] > 0][:8][::-1]
    fig = go.Figure(go.Bar(
        x=[r["tottime_us"] / 1e3 for r in rows], y=[r["function"] for r in rows], orientation="h",
        text=[f"{r['ncalls']} calls" for r in rows], textposition="auto", marker_color="#c0392b",
    ))
    sub = "cProfile own time, measured-cpu (profiler overhead included)"
    if aten_ops:
        sub += f"; {sum(aten_ops.values()):,} aten ops per call"
    fig.update_layout(title=dict(text=f"{title}<br><sup>{sub}</sup>"), xaxis_title="own time (ms)",
                      height=380, margin=dict(l=320, t=90))
    return fig


def plot_installed_vs_patched(rows: list[dict]) -> go.Figure:
    """Host ms per step (log-log) against requests, installed vs patched; a dropdown picks images/request."""
    title = "compute_mm_prefix_ranges per step: installed vLLM vs cached embedding runs"
    table = [r for r in side_by_side(rows) if "speedup" in r]
    if not table:
        return no_result("no vllm_prefix_ranges result recorded yet: run `.venv-vllm/bin/labkit bench vllm-prefix-ranges --size full`", title, height=300)
    machines = sorted({r["machine"] for r in table})
    images = sorted({r["images"] for r in table})
    fig, tags = go.Figure(), []
    for m in machines:
        for img in images:
            pts = sorted((r for r in table if r["machine"] == m and r["images"] == img), key=lambda r: r["num_requests"])
            for variant in ("installed", "patched"):
                fig.add_scatter(
                    x=[p["num_requests"] for p in pts], y=[p[f"{variant}_us"] / 1e3 for p in pts],
                    mode="lines+markers", name=f"{variant} ({m})", visible=img == images[-1],
                    line=dict(color=COLOURS[variant]),
                    customdata=[p["speedup"] for p in pts],
                    hovertemplate="%{x} requests: %{y:.3f} ms (patch: %{customdata:.0f}x faster)<extra></extra>",
                )
                tags.append(img)
    buttons = [dict(label=f"{img} images/request", method="restyle", args=[{"visible": [t == img for t in tags]}])
               for img in images]
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>host time only; {_sources(rows)}</sup>"),
        xaxis=dict(title="requests in the batch", type="log"), yaxis=dict(title="host ms per step", type="log"),
        updatemenus=[dict(buttons=buttons, active=len(images) - 1, x=0.0, y=1.15, xanchor="left")],
        height=460, margin=dict(t=130),
    )
    return fig
