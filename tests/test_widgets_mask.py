"""The mask widget keeps its heatmap in the Output widget's state, at creation and on change."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")


def _heatmap_rows(out) -> list[list[int]]:
    (output,) = out.outputs
    assert output["output_type"] == "display_data"
    fig = output["data"]["application/vnd.plotly.v1+json"]
    if isinstance(fig, str):
        fig = json.loads(fig)
    return [list(r) for r in fig["data"][0]["z"]]


def test_heatmap_is_widget_state_and_follows_the_controls(monkeypatch):
    import plotly.io as pio

    from labkit.widgets.mask import make_mask_widget

    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")  # the notebooks' renderer, without HTML

    box = make_mask_widget(q_len=4, kv_len=4, ranges="1-2")
    out = box.children[3]
    # causal = 1, allowed only through the image range (1..2) = 2
    assert _heatmap_rows(out) == [[1, 0, 0, 0], [1, 1, 2, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert out.msg_id == ""  # nothing was captured through the kernel's display path
    box.children[1].children[1].value = ""  # no images: plain causal, still one output
    assert _heatmap_rows(out) == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
