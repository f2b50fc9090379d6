"""``labkit bench mm`` end to end on tiny settings, plus the measurement API."""

from __future__ import annotations

import json

import pytest

from labkit.cli import main as labkit_main
from labkit.mm.bench_mm import parse_combos
from labkit.mm.measure import (make_decode_requests, make_decode_step, measure_decode_grid,
                               measure_decode_step_host_time, measure_placeholder_calls, measure_workload)
from labkit.mm.workload import get_workload_spec
from labkit.results import load_results


@pytest.fixture()
def results_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


def test_cli_quick_writes_all_results(results_dir, tmp_path, capsys):
    out = tmp_path / "mm.json"
    rc = labkit_main(["bench", "mm", "--size", "quick", "--sweep", "--requests", "8", "--images", "4",
                      "--combos", "list+cursor", "--json", str(out)])
    assert rc == 0
    names = {r.name for r in load_results(results_dir)}
    base = {"mm_get_num_embeds", "mm_decode_step", "mm_sweep", "mm_workload"}
    assert names == {n + "_quick" for n in base}  # quick runs never overwrite full recordings
    res = {r.name.removesuffix("_quick"): r for r in load_results(results_dir)}
    assert res["mm_decode_step"].source == "measured-cpu"
    combos = {r["combo"] for r in res["mm_decode_step"].rows}
    assert combos == {"tensor+loop", "list+loop", "list+cursor"}  # before/after always included
    assert all(r["identical_decisions"] for r in res["mm_workload"].rows)
    assert {r["sweep"] for r in res["mm_sweep"].rows} == {"requests", "images"}
    dumped = json.loads(out.read_text())
    assert set(dumped) == base
    out = capsys.readouterr().out
    assert "mm_decode_step_quick (measured-cpu):" in out and "mm_sweep_quick (measured-cpu):" in out


def test_cli_bad_input_exit_2(results_dir, capsys):
    assert labkit_main(["bench", "mm", "--combos", "list+nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad combo" in err
    assert labkit_main(["bench", "mm", "--requests", "0"]) == 2
    assert not results_dir.exists()  # nothing half-written
    assert labkit_main(["bench", "mm", "--help"]) == 0


def test_parse_combos():
    assert parse_combos("fast+window") == [("tensor", "loop"), ("list", "loop"), ("fast", "window")]


def test_measurement_api_shapes():
    reqs = make_decode_requests(3, 2, tokens_per_image=4, variant="fast")
    assert all(r.num_computed_tokens == r.num_tokens - 1 for r in reqs)
    make_decode_step(reqs, "cursor")()  # schedules nothing, changes nothing
    assert all(r.num_computed_tokens == r.num_tokens - 1 for r in reqs)
    t = measure_decode_step_host_time(2, 2, tokens_per_image=4, repeats=2, warmup=0)
    assert t.repeats == 2 and t.median_ns > 0
    grid = measure_decode_grid(2, 2, combos=[("tensor", "loop"), ("list", "loop"), ("fast", "cursor")],
                               tokens_per_image=4, repeats=2)
    med = {(r["variant"], r["strategy"]): r["median_ns"] for r in grid}
    for r in grid:  # each row against the rows it names, from their own medians
        assert r["speedup_vs_before"] == pytest.approx(med[("tensor", "loop")] / r["median_ns"])
        assert r["speedup_vs_pr"] == pytest.approx(med[("list", "loop")] / r["median_ns"])
    calls = measure_placeholder_calls(["list"], tokens_per_image=4, repeats=2)
    assert {r["method"] for r in calls} == {"get_num_embeds", "get_embeds_indices_in_range", "extract_embeds_range"}
    import gc

    frozen = gc.get_freeze_count()
    wl = measure_workload(get_workload_spec("tiny"), combos=[("list", "loop"), ("fast", "cursor")], repeats=1)
    assert [r["identical_decisions"] for r in wl] == [True, True]
    assert wl[0]["steps"] == wl[1]["steps"] > 0
    assert gc.get_freeze_count() == frozen and gc.isenabled()  # the objects frozen for the rounds are back


# --- figures and the live widget (built from hand-made rows) --------------------------------
def _sweep_rows():
    rows = []
    for combo, per_image in (("tensor+loop", 2000), ("list+loop", 200), ("list+cursor", 0)):
        v, s = combo.split("+")
        for m in (1, 8, 64):
            rows.append({"sweep": "images", "combo": combo, "variant": v, "strategy": s, "num_requests": 128,
                         "images_per_request": m, "median_ns": 1000 + 128 * m * per_image,
                         "p20_ns": 1, "p80_ns": 1, "source": "measured-cpu", "machine": "cpu-x"})
    return rows


def test_before_after_buttons_toggle_combos():
    from labkit.viz.lab.mm import COMBO_LABELS, plot_before_after

    fig = plot_before_after(_sweep_rows(), "images")
    names = [t.name for t in fig.data]
    assert names == [COMBO_LABELS[c] for c in ("tensor+loop", "list+loop", "list+cursor")]
    assert [t.visible for t in fig.data] == [True, True, False]  # starts on before vs #40143
    buttons = fig.layout.updatemenus[0].buttons
    views = {b.label: b.args[0]["visible"] for b in buttons}
    assert views == {"before vs #40143": [True, True, False], "#40143 vs this lab": [False, True, True],
                     "all": [True, True, True]}
    assert list(fig.data[0].y) == [(1000 + 128 * m * 2000) / 1e6 for m in (1, 8, 64)]


def test_widget_callback_measures_and_draws(monkeypatch):
    pytest.importorskip("ipywidgets")
    from labkit.widgets.mm import make_mm_widget, measure_shape, shape_figure

    rows = measure_shape(2, 2, 4, [("list", "loop"), ("fast", "cursor")], repeats=2)
    fig = shape_figure(rows)
    assert len(fig.data[0].y) == 2 and "2 requests x 2 images x 4 tokens" in fig.layout.title.text
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)  # what the button puts on the page
    box = make_mm_widget(repeats=1)
    sliders = box.children[0].children
    for s, v in zip(sliders, (2, 2, 4)):
        s.value = v
    box.children[1].value = ("list+loop", "fast+cursor")
    box.on_measure()
    (fig,) = shown
    assert "2 requests x 2 images x 4 tokens" in fig.layout.title.text
    from labkit.viz.lab.mm import COMBO_LABELS

    assert list(fig.data[0].y) == [COMBO_LABELS.get(c, c) for c in ("list+loop", "fast+cursor")]
    assert len(fig.data[0].x) == 2 and all(x > 0 for x in fig.data[0].x)
    box.children[1].value = ()
    box.on_measure()  # nothing chosen: a line saying so, no figure
    assert len(shown) == 1
    with pytest.raises(ValueError):
        measure_shape(2, 2, 4, [])
