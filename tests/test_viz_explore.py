"""The explorer figure: one bar trace per recorded (menu, slider) slice, one shown at a time; each
slider step and menu button shows exactly its own slice (checked against the rows written here),
and in a browser a click on the slider or the menu changes the bars with no kernel."""

from __future__ import annotations

import plotly.io as pio
import pytest
from report_pages import drive_control, shown_data

from labkit.viz.explore import plot_explorer

# a grid with a hole: 62 layers were not recorded at 1 sequence
ROWS = [dict(variant=v, seqs=n, layers=layer, ms=float(10 * i + n + layer))
        for layer in (34, 62) for n in (1, 8, 128) for i, v in enumerate(("per_layer", "per_step", "cached"))
        if not (layer == 62 and n == 1)]


def _fig():
    return plot_explorer(ROWS, x="variant", y="ms", slider="seqs", menu="layers", names={"seqs": "sequences"},
                         start={"seqs": 8}, title="t", y_title="ms", unit="ms", highlight=("per_layer",))


def _visible(fig, visible) -> list[tuple]:
    return [tuple(t.y) for t, v in zip(fig.data, visible) if v]


def test_one_trace_per_recorded_slice_and_the_start_one_shown():
    fig = _fig()
    assert len(fig.data) == 5  # (34: 1, 8, 128) + (62: 8, 128)
    assert [t.visible for t in fig.data] == [False, True, False, False, False]
    assert tuple(fig.data[1].y) == (42.0, 52.0, 62.0) and list(fig.data[1].x) == ["per_layer", "per_step", "cached"]
    assert list(fig.data[1].marker.color) == ["#e67e22", "#1f5f99", "#1f5f99"]
    assert fig.data[1].text == ("42 ms", "52 ms", "62 ms")


def test_each_step_and_button_shows_its_own_slice():
    fig = _fig()
    (slider,) = fig.layout.sliders
    assert [s.label for s in slider.steps] == ["1", "8", "128"] and slider.active == 1
    assert [_visible(fig, s.args[0]["visible"]) for s in slider.steps] == [[(35.0, 45.0, 55.0)], [(42.0, 52.0, 62.0)],
                                                                          [(162.0, 172.0, 182.0)]]
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == ["layers: 34", "layers: 62"]
    data, layout = menu.buttons[1].args
    assert _visible(fig, data["visible"]) == [(70.0, 80.0, 90.0)]  # 62 layers, 8 sequences
    assert [s["label"] for s in layout["sliders"][0]["steps"]] == ["8", "128"]  # no step for the hole
    assert [_visible(fig, s["args"][0]["visible"]) for s in layout["sliders"][0]["steps"]] == [
        [(70.0, 80.0, 90.0)], [(190.0, 200.0, 210.0)]]


def test_one_control_alone_and_nothing_to_explore():
    fig = plot_explorer(ROWS, x="variant", y="ms", menu="seqs", title="t", y_title="ms")
    assert not fig.layout.sliders and len(fig.layout.updatemenus[0].buttons) == 3
    assert len(fig.data) == 3 and sum(bool(t.visible) for t in fig.data) == 1
    assert _visible(fig, fig.layout.updatemenus[0].buttons[2].args[0]["visible"]) == [
        (162.0, 172.0, 182.0, 190.0, 200.0, 210.0)]
    empty = plot_explorer([], x="variant", y="ms", title="t", y_title="ms")
    assert not empty.data and "no recorded result" in empty.layout.annotations[0].text


@pytest.mark.browser
@pytest.mark.parametrize("control", ["slider", "menu"])
def test_a_click_changes_the_bars_without_a_kernel(browser, tmp_path, control):
    path = tmp_path / "explore.html"
    path.write_text(pio.to_html(_fig(), include_plotlyjs=True, full_html=True), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_selector(".plotly-graph-div .main-svg")
        before = shown_data(page, 0)
        assert drive_control(page, 0, prefer=control) == control
        after = shown_data(page, 0)
    finally:
        page.close()
    assert before != after
    assert after == ([[["per_layer", "per_step", "cached"], [35, 45, 55]]] if control == "slider"
                     else [[["per_layer", "per_step", "cached"], [70, 80, 90]]])


def test_long_labels_wrap_instead_of_slanting_over_the_slider():
    rows = [dict(x="before #40143 (tensor cumsum, visit all)", n=1, ms=2.0), dict(x="cursor", n=1, ms=1.0)]
    fig = plot_explorer(rows, x="x", y="ms", slider="n", title="t", y_title="ms", highlight=(rows[0]["x"],))
    assert list(fig.data[0].x) == ["before #40143<br>(tensor cumsum,<br>visit all)", "cursor"]
    assert list(fig.data[0].marker.color) == ["#e67e22", "#1f5f99"]  # highlighted by the label as given
