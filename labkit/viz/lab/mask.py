"""Figures of the prefix-LM attention mask and of the attention benchmark (plotly, never shown here)."""

from __future__ import annotations

import plotly.graph_objects as go
import torch

from labkit.attn.prefix_mask import as_range_list, prefix_lm_mask

__all__ = ["mask_categories", "plot_mask", "plot_mask_window_slider", "plot_mask_examples", "plot_attn_bench",
           "EXAMPLE_RANGE_SETS"]

_CATEGORY_NAMES = ("masked", "causal / window", "image range only")
_COLOURS = ((0.0, "#f2f2f2"), (0.333, "#f2f2f2"), (0.333, "#3a6ea5"), (0.666, "#3a6ea5"),
            (0.666, "#e07b39"), (1.0, "#e07b39"))

#: small example prompts: (q_len, kv_len, ranges)
EXAMPLE_RANGE_SETS = {
    "two images": (24, 24, [(2, 7), (12, 17)]),
    "image at start and end": (24, 24, [(0, 5), (18, 23)]),
    "chunked prefill": (12, 24, [(2, 7), (12, 17)]),
    "decode": (1, 24, [(2, 7), (12, 17)]),
    "text only": (24, 24, []),
}


def mask_categories(q_len: int, kv_len: int, ranges=None, sliding_window: int = 0) -> torch.Tensor:
    """int8 ``(q_len, kv_len)``: 0 masked, 1 allowed by the causal/window rule, 2 allowed only by a range."""
    full = prefix_lm_mask(q_len, kv_len, ranges, sliding_window)
    causal = prefix_lm_mask(q_len, kv_len, None, sliding_window)
    cat = torch.zeros((q_len, kv_len), dtype=torch.int8)
    cat[causal] = 1
    cat[full & ~causal] = 2
    return cat


def _heatmap(q_len, kv_len, ranges, sliding_window, visible=True) -> go.Heatmap:
    cat = mask_categories(q_len, kv_len, ranges, sliding_window)
    names = [[_CATEGORY_NAMES[v] for v in row] for row in cat.tolist()]
    return go.Heatmap(
        z=cat.tolist(), x=list(range(kv_len)), y=list(range(kv_len - q_len, kv_len)), zmin=0, zmax=2,
        colorscale=_COLOURS, customdata=names, showscale=False, xgap=1, ygap=1, visible=visible,
        hovertemplate="query %{y}, key %{x}: %{customdata}<extra></extra>",
    )


def _layout(fig: go.Figure, title: str) -> go.Figure:
    fig.update_layout(title=title, xaxis_title="key position", yaxis_title="query position",
                      yaxis_autorange="reversed", plot_bgcolor="white", width=620, height=560)
    fig.update_yaxes(scaleanchor="x", scaleratio=1)
    return fig


def _legend_note(fig: go.Figure) -> None:
    fig.add_annotation(text="blue: causal/window  orange: image range only  grey: masked", xref="paper",
                       yref="paper", x=0, y=1.0, xanchor="left", yanchor="bottom", showarrow=False,
                       font={"size": 11})  # above the plot: below it the key axis' title would cover it


def plot_mask(q_len: int, kv_len: int, ranges=None, sliding_window: int = 0, *, title: str | None = None) -> go.Figure:
    """Heatmap of one sequence's mask; image ranges (inclusive, absolute) are outlined on the key axis."""
    fig = go.Figure(_heatmap(q_len, kv_len, ranges, sliding_window))
    for s, e in as_range_list(ranges):
        if s < e:
            fig.add_vrect(x0=s - 0.5, x1=e + 0.5, line_width=1, line_color="#e07b39", fillcolor="rgba(0,0,0,0)")
    window = f", window {sliding_window}" if sliding_window else ""
    _legend_note(fig)
    return _layout(fig, title or f"prefix-LM mask: {q_len} queries x {kv_len} keys{window}")


def plot_mask_window_slider(q_len: int, kv_len: int, ranges=None, windows=(0, 2, 4, 8, 16)) -> go.Figure:
    """The mask with a plotly slider over sliding-window sizes (0 = none); works in exported HTML."""
    windows = list(windows)
    fig = go.Figure([_heatmap(q_len, kv_len, ranges, w, visible=(i == 0)) for i, w in enumerate(windows)])
    steps = [{"label": str(w) if w else "none", "method": "update",
              "args": [{"visible": [j == i for j in range(len(windows))]},
                       {"title": f"prefix-LM mask, sliding window {w or 'none'}"}]} for i, w in enumerate(windows)]
    fig.update_layout(sliders=[{"active": 0, "steps": steps, "currentvalue": {"prefix": "window: "}, "y": -0.05}])
    return _layout(fig, f"prefix-LM mask, sliding window {windows[0] or 'none'}")


def plot_mask_examples(examples: dict | None = None, sliding_window: int = 0) -> go.Figure:
    """The mask of several example prompts with a plotly dropdown to switch between them."""
    examples = examples or EXAMPLE_RANGE_SETS
    names = list(examples)
    fig = go.Figure([_heatmap(*examples[n], sliding_window, visible=(i == 0)) for i, n in enumerate(names)])
    buttons = [{"label": n, "method": "update",
                "args": [{"visible": [j == i for j in range(len(names))]}, {"title": f"prefix-LM mask: {n}"}]}
               for i, n in enumerate(names)]
    fig.update_layout(updatemenus=[{"buttons": buttons, "x": 1.0, "y": 1.12, "xanchor": "right"}])
    _legend_note(fig)
    return _layout(fig, f"prefix-LM mask: {names[0]}")


def plot_attn_bench(rows: list[dict], *, title: str = "prefix-LM attention", include_sweep: bool = False
                    ) -> go.Figure:
    """Grouped bars of TFLOP/s per case and variant, with buttons to show milliseconds instead.

    ``rows``: ``attn_bench`` rows (``results_rows`` adds ``machine``/``gpu_name``/``source``);
    rows without timings (errors, interpreter checks) are left out.
    """
    timed = [r for r in rows if "median_ns" in r and (include_sweep or "[" not in r["variant"])]
    fig = go.Figure()
    variants = list(dict.fromkeys(r["variant"] for r in timed))
    for v in variants:
        mine = [r for r in timed if r["variant"] == v]
        fig.add_bar(name=v, x=[r["case"] for r in mine], y=[r["tflops"] for r in mine],
                    customdata=[r["median_ns"] / 1e6 for r in mine],
                    hovertemplate="%{x}: %{y:.1f} TFLOP/s, %{customdata:.3f} ms<extra>" + v + "</extra>")
    ms = [[r["median_ns"] / 1e6 for r in timed if r["variant"] == v] for v in variants]
    tf = [[r["tflops"] for r in timed if r["variant"] == v] for v in variants]
    fig.update_layout(
        barmode="group", title=title, xaxis_title="case", yaxis_title="TFLOP/s (allowed pairs only)",
        updatemenus=[{"type": "buttons", "direction": "right", "x": 1.0, "y": 1.15, "xanchor": "right", "buttons": [
            {"label": "TFLOP/s", "method": "update", "args": [{"y": tf}, {"yaxis.title.text": "TFLOP/s"}]},
            {"label": "ms", "method": "update", "args": [{"y": ms}, {"yaxis.title.text": "median ms"}]}]}],
    )
    if not timed:
        fig.add_annotation(text="no timed rows (speed needs a GPU)", xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False)
    return fig
