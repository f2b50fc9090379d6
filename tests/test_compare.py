"""Machines side by side: sources kept apart, missing metrics shown as missing (hand-built result sets)."""

from __future__ import annotations

import math

import pytest

from labkit.results import make_result
from labkit.viz.machines import compare
from labkit.viz.sources import SOURCE_ORDER, source_style, source_title


def _r(name, slug, rows, source="measured-gpu"):
    return make_result(name, rows, source=source, machine={"slug": slug, "gpu_name": slug.upper()})


VARIANTS = ("tensor/loop", "list/loop")


def _engine_old(slug="h200"):
    """Engine rows recorded before ``tokens_per_s_median`` existed (only ``tokens_per_s``)."""
    return _r("engine", slug, [{"variant": v, "tokens_per_s": t, "median_ns": 1e6, "batch_seqs": 128}
                               for v, t in zip(VARIANTS, (200.0, 5600.0))])


def _engine_sim(slug="cpu-x-2c"):
    return _r("engine", slug, [{"variant": v, "tokens_per_s_median": t, "median_ns": 2e6}
                               for v, t in zip(VARIANTS, (3400.0, 4100.0))], "simulated")


def _mm(slug="cpu-x-2c"):
    return _r("mm_sweep", slug, [{"variant": "list", "median_us": 10.0}, {"variant": "tensor", "median_us": 90.0}],
              "measured-cpu")


def _attn_interpreted(slug="cpu-x-2c"):
    return _r("attn_bench", slug, [{"variant": "triton_prefix", "case": "a", "max_abs_err": 1e-3}], "interpreted")


def _attn_gpu(slug="h200"):
    return _r("attn_bench", slug, [{"variant": "triton_prefix", "case": "a", "tflops": 250.0, "median_ns": 9e4}])


# ---- the table keeps rows that lack the metric ------------------------------------------------

def test_rows_without_the_main_metric_stay_with_a_reason():
    t = compare.comparison_table([_engine_old(), _engine_sim()])
    assert len(t) == 4                                   # nothing dropped: 2 variants x 2 machines
    assert set(t["metric"]) == {"tokens_per_s_median"}
    by = t.set_index(["machine", "label"])
    assert by.loc[("cpu-x-2c", "list/loop"), "value"] == 4100.0
    assert by.loc[("cpu-x-2c", "list/loop"), "missing"] == ""
    for v in VARIANTS:
        assert math.isnan(by.loc[("h200", v), "value"])
        assert by.loc[("h200", v), "missing"] == "no tokens_per_s_median (has tokens_per_s, median_ns)"
        assert by.loc[("h200", v), "source"] == "measured-gpu"
    assert by.loc[("cpu-x-2c", "tensor/loop"), "source"] == "simulated"


def test_interpreted_rows_say_they_are_never_timed():
    t = compare.comparison_table([_attn_gpu(), _attn_interpreted()])
    row = t[t["machine"] == "cpu-x-2c"].iloc[0]
    assert math.isnan(row["value"]) and row["source"] == "interpreted"
    assert row["missing"] == "no tflops: interpreted run (correctness only, never timed)"
    assert t[t["machine"] == "h200"]["value"].tolist() == [250.0]


def test_summarised_sweep_keeps_variants_whose_rows_all_lack_the_metric(monkeypatch):
    monkeypatch.setattr(compare, "MAX_LABELS", 2)
    rows = [{"variant": "a", "n": n, "median_us": v} for n, v in ((1, 1.0), (2, 3.0), (3, None))]
    rows += [{"variant": "b", "n": n, "median_ns": 5.0} for n in (1, 2, 3)]
    t = compare.comparison_table([_r("mm_sweep", "h200", rows)])
    by = t.set_index("label")
    assert by.loc["a (median over sweep)", "value"] == 2.0          # median of the rows that have one
    assert math.isnan(by.loc["b (median over sweep)", "value"])
    assert by.loc["b (median over sweep)", "missing"] == "no median_us (has median_ns)"


def test_a_parameter_only_some_rows_have_labels_those_rows():
    rows = [{"variant": "list_index", "metric": "host_ns", "median_ns": 12.0}]
    rows += [{"variant": "h2d_pageable", "metric": "host_ns", "size_bytes": b, "median_ns": m}
             for b, m in ((256, 15000.0), (4096, 15100.0), (1048576, 89000.0))]
    t = compare.comparison_table([_r("calibration", "h200", rows)])
    assert t["label"].tolist() == ["list_index", "h2d_pageable | size_bytes=256",
                                   "h2d_pageable | size_bytes=4096", "h2d_pageable | size_bytes=1048576"]
    assert t["value"].tolist() == [12.0, 15000.0, 15100.0, 89000.0]


# ---- what is missing, per machine -------------------------------------------------------------

def test_missing_table_lists_absent_results_metricless_results_and_rows_without_values():
    odd = _r("mm_overlap", "cpu-x-2c", [{"case": "pr", "explained_fraction": 0.4}], "simulated")
    results = [_engine_old(), _engine_sim(), _mm(), odd, _attn_gpu(), _attn_interpreted()]
    got = compare.missing_table(results)
    assert list(got.columns) == compare.MISSING_COLUMNS
    expected = [
        ("cpu-x-2c", "interpreted", "attn_bench", 1, 1, "no tflops: interpreted run (correctness only, never timed)"),
        ("cpu-x-2c", "simulated", "mm_overlap", 1, 1,
         "no main metric (none of median_us, median_ns, step_us, output_tok_s)"),
        ("h200", "measured-gpu", "engine", 2, 2, "no tokens_per_s_median (has tokens_per_s, median_ns)"),
        ("h200", "", "mm_overlap", 0, 0, "no mm_overlap result"),
        ("h200", "", "mm_sweep", 0, 0, "no mm_sweep result"),
    ]
    assert [tuple(r) for r in got[["machine", "source", "result", "rows", "missing_rows", "reason"]]
            .itertuples(index=False)] == expected
    assert set(got.loc[got["result"] == "engine", "section"]) == {"engine and bubbles"}


def test_missing_table_counts_only_the_rows_that_lack_the_metric():
    rows = [{"variant": "a", "median_us": 1.0}, {"variant": "b", "median_us": None, "median_ns": 4.0},
            {"variant": "c"}]
    got = compare.missing_table([_r("mm_sweep", "h200", rows)])
    assert got[["rows", "missing_rows", "reason"]].values.tolist() == [
        [3, 1, "no median_us (has median_ns)"], [3, 1, "no median_us"]]


def test_nothing_missing_and_no_results():
    assert compare.missing_table([_mm("a"), _mm("b")]).empty
    empty = compare.missing_table([])
    assert empty.empty and list(empty.columns) == compare.MISSING_COLUMNS
    assert compare.side_by_side(compare.comparison_table([])).empty


# ---- the wide table: a source column per machine ----------------------------------------------

def test_side_by_side_has_a_source_and_a_value_per_machine():
    results = [_engine_old(), _engine_sim(), _mm()]
    wide = compare.side_by_side(compare.comparison_table(results))
    # measured machines first, then simulated; each with (source, value)
    assert list(wide.columns) == [("h200", "source"), ("h200", "value"), ("cpu-x-2c", "source"), ("cpu-x-2c", "value")]
    eng = wide.loc[("engine", "tokens_per_s_median", "list/loop")]
    assert eng[("h200", "source")] == "measured-gpu" and eng[("h200", "value")] == compare.MISSING
    assert eng[("cpu-x-2c", "source")] == "simulated" and eng[("cpu-x-2c", "value")] == 4100.0
    mm = wide.loc[("mm_sweep", "median_us", "tensor")]
    assert mm[("h200", "source")] == "" and mm[("h200", "value")] == compare.NO_RESULT
    assert mm[("cpu-x-2c", "source")] == "measured-cpu" and mm[("cpu-x-2c", "value")] == 90.0


# ---- the figure: sources apart, missing marked ------------------------------------------------

def test_sources_have_distinct_titles_and_fills():
    fills = {s: source_style(s)[1] for s in SOURCE_ORDER}
    assert fills["measured-gpu"] == fills["measured-cpu"] == ""
    assert fills["simulated"] and fills["interpreted"] and fills["simulated"] != fills["interpreted"]
    assert len({source_title(s) for s in SOURCE_ORDER}) == len(SOURCE_ORDER)
    assert source_style("measured-gpu", 0)[0] != source_style("measured-gpu", 1)[0]


def test_plot_groups_the_legend_by_source_and_hatches_simulated_bars():
    results = [_engine_old(), _engine_sim(), _r("engine", "a100", _engine_old().rows)]
    fig = compare.plot_comparison(compare.comparison_table(results))
    bars = {tr.name: tr for tr in fig.data if tr.type == "bar"}
    assert set(bars) == {"a100 (measured-gpu)", "h200 (measured-gpu)", "cpu-x-2c (simulated)"}
    assert {n: tr.legendgroup for n, tr in bars.items()} == {
        "a100 (measured-gpu)": "measured-gpu", "h200 (measured-gpu)": "measured-gpu",
        "cpu-x-2c (simulated)": "simulated"}
    assert bars["cpu-x-2c (simulated)"].legendgrouptitle.text == "simulated (a model, not hardware)"
    assert bars["cpu-x-2c (simulated)"].marker.pattern.shape == "/"
    assert not bars["h200 (measured-gpu)"].marker.pattern.shape
    assert bars["a100 (measured-gpu)"].marker.color != bars["h200 (measured-gpu)"].marker.color
    # measured machines rank before simulated ones in the legend
    assert bars["h200 (measured-gpu)"].legendrank < bars["cpu-x-2c (simulated)"].legendrank
    title = fig.layout.title.text
    assert "measured-gpu: a100, h200" in title and "simulated: cpu-x-2c" in title and "mixed sources" in title
    assert "hatched: simulated" in fig.layout.xaxis.title.text


def test_plot_marks_missing_values_in_the_machines_slot():
    results = [_engine_old(), _engine_sim(), _mm()]
    fig = compare.plot_comparison(compare.comparison_table(results))
    names = [tr.name for tr in fig.data]
    assert names == ["cpu-x-2c (simulated)", "h200 (measured-gpu)", "h200 (measured-gpu): missing",
                     "cpu-x-2c (measured-cpu)"]
    h200_bar, marker = fig.data[1], fig.data[2]
    assert list(h200_bar.y) == [None, None]                      # no value drawn, but the trace is there
    assert marker.type == "scatter" and list(marker.x) == list(VARIANTS)
    assert marker.offsetgroup == h200_bar.offsetgroup and marker.yaxis == "y2"
    assert all("has tokens_per_s" in h for h in marker.hovertext)
    assert fig.layout.scattermode == "group"
    (menu,) = fig.layout.updatemenus
    by = {b.label: b.args for b in menu.buttons}
    assert by["engine"][0]["visible"] == [True, True, True, False]
    assert by["mm_sweep"][0]["visible"] == [False, False, False, True]
    (note,) = by["engine"][1]["annotations"]
    assert note["visible"] and "h200: no tokens_per_s_median" in note["hovertext"]
    (note,) = by["mm_sweep"][1]["annotations"]
    assert note["visible"] and note["hovertext"] == "no result on h200"
    # the page opens on the first result, with its note
    assert fig.layout.annotations[0].visible and "h200" in fig.layout.annotations[0].text


def test_plot_note_is_hidden_when_nothing_is_missing():
    fig = compare.plot_comparison(compare.comparison_table([_mm("a"), _mm("b")]))
    (menu,) = fig.layout.updatemenus
    (note,) = menu.buttons[0].args[1]["annotations"]
    assert note["visible"] is False
    assert all(tr.type == "bar" for tr in fig.data)


@pytest.mark.parametrize("log", [True, False])
def test_axis_scale_ignores_missing_values(log):
    hi = 1000.0 if log else 20.0
    rows = [{"variant": "a", "median_us": 1.0}, {"variant": "b", "median_us": hi}, {"variant": "c", "p20_us": 2.0}]
    fig = compare.plot_comparison(compare.comparison_table([_r("mm_sweep", "h200", rows)]))
    assert fig.layout.yaxis.type == ("log" if log else "linear")


def test_the_next_bubble_has_its_own_section():
    assert compare.section_of("vllm_prefix_ranges") == compare.section_of("vllm_prefix_ranges_quick") == \
        "the next bubble"
    assert compare.section_of("vllm_ab") == "vLLM A/B"
    assert "the next bubble" in {section for section, _ in compare.MAIN_METRICS.values()}


def test_title_lines_stay_bounded_with_many_machines():
    results = [_r("mm_sweep", f"gpu-model-{i:02d}-with-a-long-slug", _mm().rows) for i in range(12)]
    results.append(_r("mm_sweep", "cpu-x-2c", _mm().rows, "simulated"))
    fig = compare.plot_comparison(compare.comparison_table(results))
    sources_line = fig.layout.title.text.split("<sup>")[1].removesuffix("</sup>")
    assert len(sources_line) <= compare.SOURCES_LINE_CHARS and sources_line.endswith("compare with care")
    assert len({tr.name for tr in fig.data}) == 13          # every machine is still in the legend
