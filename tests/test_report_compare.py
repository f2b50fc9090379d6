"""Machines side by side (labkit.viz.machines.compare) and the calibration figures, on hand-made results."""

from __future__ import annotations

import pytest

from labkit.results import make_result
from labkit.viz.machines import calibration as vcal
from labkit.viz.machines import compare


def _r(name, slug, rows, source="measured-gpu"):
    return make_result(name, rows, source=source, machine={"slug": slug, "gpu_name": slug.upper()})


def _sweep(slug, scale):
    rows = []
    for variant, base in (("tensor", 100.0), ("list", 10.0)):
        for n in (1, 8):
            rows.append({"variant": variant, "num_requests": n, "median_us": base * n * scale,
                         "calls_count": n * 32, "p20_us": 1.0, "repeats": 20})
    return rows


def test_section_and_metric_mapping():
    assert compare.section_of("mm_decode_step") == compare.section_of("mm_sweep")
    assert compare.section_of("calibration") == "calibration"
    assert compare.section_of("engine-notebook") == compare.section_of("engine_sweep") == "engine and bubbles"
    assert compare.section_of("calibration_extra") is None
    assert compare.section_of("unknown") is None
    assert compare.main_metric("mm_x", ["median_ns", "median_us"]) == "median_us"
    assert compare.main_metric("engine_run", ["median_ns", "output_tok_s"]) == "output_tok_s"
    assert compare.main_metric("whatever", ["median_ms"]) == "median_ms"
    assert compare.main_metric("whatever", ["p20_ns"]) is None


def test_comparison_table_labels_by_swept_parameter_only():
    results = [_r("mm_sweep", "h200", _sweep("h200", 1.0)), _r("mm_sweep", "cpu-x-2c", _sweep("c", 3.0), "measured-cpu")]
    t = compare.comparison_table(results)
    assert len(t) == 8
    # calls_count follows from num_requests, repeats is bookkeeping: neither is in the label
    assert sorted(set(t["label"])) == ["list | num_requests=1", "list | num_requests=8",
                                       "tensor | num_requests=1", "tensor | num_requests=8"]
    got = t.set_index(["machine", "label"])["value"]
    assert got[("h200", "tensor | num_requests=8")] == 800.0
    assert got[("cpu-x-2c", "list | num_requests=1")] == 30.0
    assert set(t["metric"]) == {"median_us"}
    assert set(t["source"]) == {"measured-gpu", "measured-cpu"}


def test_unknown_metric_results_are_skipped_and_big_sweeps_summarised(monkeypatch):
    odd = _r("mm_odd", "h200", [{"variant": "a", "weird": 1.0}])
    monkeypatch.setattr(compare, "MAX_LABELS", 3)
    t = compare.comparison_table([odd, _r("mm_sweep", "h200", _sweep("h200", 1.0))])
    assert set(t["result"]) == {"mm_sweep"}
    by = t.set_index("label")["value"]
    assert by["tensor (median over sweep)"] == pytest.approx(450.0)   # median of 100 and 800
    assert by["list (median over sweep)"] == pytest.approx(45.0)


def test_plot_comparison_dropdown_switches_results():
    results = [_r("mm_sweep", "h200", _sweep("h200", 1.0)), _r("mm_sweep", "cpu-x-2c", _sweep("c", 2.0), "simulated"),
               _r("h2d_step", "h200", [{"variant": "per_layer", "median_ns": 5.0}, {"variant": "per_step", "median_ns": 1.0}])]
    fig = compare.plot_comparison(compare.comparison_table(results))
    names = [tr.name for tr in fig.data]
    assert names == ["h200 (measured-gpu)", "cpu-x-2c (simulated)", "h200 (measured-gpu)"]
    (menu,) = fig.layout.updatemenus
    labels = [b.label for b in menu.buttons]
    assert labels == ["h2d_step", "mm_sweep"]
    vis = {b.label: b.args[0]["visible"] for b in menu.buttons}
    assert vis["h2d_step"] == [True, False, False]
    assert vis["mm_sweep"] == [False, True, True]
    assert [tr.visible for tr in fig.data] == [True, False, False]
    assert "simulated" in " ".join(names)


def test_plot_comparison_empty():
    fig = compare.plot_comparison(compare.comparison_table([]))
    assert "no recorded results" in fig.layout.annotations[0].text


def test_calibration_figures():
    cpu_rows = [{"kind": "cpu", "variant": v, "metric": "host_ns", "median_ns": m, "p20_ns": m - 1, "p80_ns": m + 2}
                for v, m in (("list_index", 15.0), ("tensor_index_int", 1100.0))]
    gpu_rows = [{"kind": "gpu", "variant": "h2d_pageable", "metric": "host_ns", "size_bytes": 256, "median_ns": 9000.0,
                 "p20_ns": 1, "p80_ns": 1},
                {"kind": "gpu", "variant": "h2d_pinned", "metric": "host_ns", "size_bytes": 256, "median_ns": 3000.0,
                 "p20_ns": 1, "p80_ns": 1}]
    a = _r("calibration", "h200", cpu_rows + gpu_rows)
    b = _r("calibration", "cpu-x-2c", cpu_rows, "measured-cpu")
    fig = vcal.plot_cpu_calibration([a, b])
    assert len(fig.data) == 2 and list(fig.data[0].x) == ["list[i]", "int(tensor[i])"]
    assert list(fig.data[0].error_y.array) == [2.0, 2.0] and list(fig.data[0].error_y.arrayminus) == [1.0, 1.0]
    assert [btn.label for btn in fig.layout.updatemenus[0].buttons] == ["all machines", "h200 (measured-gpu)",
                                                                          "cpu-x-2c (measured-cpu)"]
    g = vcal.plot_gpu_calibration([a, b])
    assert len(g.data) == 2 and list(g.data[0].y) == [9.0]  # us
    empty = vcal.plot_gpu_calibration([b])
    assert "no GPU calibration" in empty.layout.annotations[0].text
