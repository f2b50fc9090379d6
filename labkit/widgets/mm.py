"""Live before/after explorer for #40143: pick a decode-step shape and variants, measure here, redraw."""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.mm.measure import DEFAULT_COMBOS, measure_decode_grid
from labkit.viz.lab.mm import COMBO_LABELS

__all__ = ["measure_shape", "shape_figure", "make_mm_widget"]


def measure_shape(num_requests: int, images_per_request: int, tokens_per_image: int = 256,
                  combos=DEFAULT_COMBOS, repeats: int = 5) -> list[dict]:
    """``mm_decode_step``-style rows for one shape and the chosen ``(variant, strategy)`` combos."""
    combos = list(combos)
    if not combos:
        raise ValueError("choose at least one variant + strategy")
    return measure_decode_grid(num_requests, images_per_request, combos=combos, tokens_per_image=tokens_per_image,
                               repeats=repeats, warmup=1)


def shape_figure(rows: list[dict], source: str = "measured-cpu") -> go.Figure:
    """Horizontal bars of host ms per decode step, with the ratio to the #40143 path where measured."""
    fig = go.Figure()
    fig.add_bar(y=[COMBO_LABELS.get(r["combo"], r["combo"]) for r in rows], x=[r["median_ns"] / 1e6 for r in rows],
                orientation="h", text=[f"{r['speedup_vs_pr']:.1f}x vs #40143" if r.get("speedup_vs_pr") else ""
                                       for r in rows], textposition="auto")
    shape = rows[0] if rows else {}
    fig.update_layout(title=(f"{shape.get('num_requests')} requests x {shape.get('images_per_request')} images x "
                             f"{shape.get('tokens_per_image')} tokens: host time per decode step ({source})"),
                      xaxis=dict(type="log", title="ms per step"), yaxis=dict(autorange="reversed"),
                      margin=dict(l=280))
    return fig


def make_mm_widget(repeats: int = 5):
    """An ipywidgets VBox: sliders for requests, images and tokens per image, a combo picker and a run button."""
    import ipywidgets as w
    from IPython.display import display

    requests = w.IntSlider(value=128, min=1, max=256, description="requests")
    images = w.IntSlider(value=32, min=1, max=64, description="images/req")
    tokens = w.IntSlider(value=256, min=1, max=1024, description="tokens/img")
    names = [f"{v}+{s}" for v, s in DEFAULT_COMBOS]
    picker = w.SelectMultiple(options=names, value=tuple(names), rows=len(names), description="variants")
    run = w.Button(description="measure", button_style="primary")
    out = w.Output()

    def on_click(_button=None):
        combos = [tuple(c.split("+")) for c in picker.value]
        out.clear_output(wait=True)
        with out:
            if not combos:
                print("choose at least one variant + strategy")
                return
            display(shape_figure(measure_shape(requests.value, images.value, tokens.value, combos, repeats)))

    run.on_click(on_click)
    box = w.VBox([w.HBox([requests, images, tokens]), picker, run, out])
    box.on_measure = on_click  # exposed for tests and scripted use
    return box
