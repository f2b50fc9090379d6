"""The appendix of 06: a machines x results matrix with only the cells that exist, and each
result's side-by-side numbers folded behind its own click."""

from __future__ import annotations

import pandas as pd

from labkit.results import BenchResult
from labkit.viz.machines.appendix import one_per_machine, results_matrix, side_by_side_html


def res(name, slug, source, n, size="full"):
    return BenchResult(name=name, source=source, params={}, rows=[{"i": i} for i in range(n)],
                       machine={"slug": slug}, size=size)


def test_matrix_has_a_cell_only_where_a_machine_recorded_the_result():
    t = results_matrix([res("calibration", "h200", "measured-gpu", 20, "quick"), res("calibration", "cpu", "measured-cpu", 4),
                        res("mm_sweep_quick", "cpu", "measured-cpu", 3, "quick"), res("mm_sweep", "cpu", "measured-cpu", 9)])
    assert t.headers == ("result", "h200", "cpu")  # measured on a GPU first
    rows = dict((r[0], r[1:]) for r in t.cells)
    assert rows["calibration"] == ("20 rows, quick", "4 rows")
    assert rows["mm_sweep"] == ("", "9 rows")  # the full run stands for its quick one
    sim = results_matrix([res("engine", "cpu", "simulated", 21), res("attn_bench", "cpu", "interpreted", 2, "quick")])
    assert dict((r[0], r[1]) for r in sim.cells) == {"engine": "21 rows, simulated", "attn_bench": "2 rows, quick, interpreted"}
    assert "no result" not in t._repr_html_()


def test_side_by_side_folds_each_result_with_only_its_machines():
    table = pd.DataFrame([
        {"result": "a", "metric": "median_ns", "label": "x", "machine": "m1", "source": "measured-cpu", "value": 1234.5},
        {"result": "a", "metric": "median_ns", "label": "x", "machine": "m2", "source": "measured-gpu", "value": float("nan")},
        {"result": "b", "metric": "tflops", "label": "y", "machine": "m2", "source": "measured-gpu", "value": 99.0}])
    html = side_by_side_html(table)
    assert html.count("<details>") == 2
    assert "1,230 (measured-cpu)" in html and "missing (measured-gpu)" in html
    b = html[html.index("<code>b</code>"):]
    assert "m1" not in b and "99 (measured-gpu)" in b


def test_one_run_per_machine_under_the_results_base_name():
    got = one_per_machine([res("calibration_quick", "cpu", "measured-cpu", 3, "quick"), res("calibration", "cpu", "measured-cpu", 4),
                           res("calibration_quick", "h200", "measured-gpu", 20, "quick")])
    assert [(r.slug, r.name, len(r.rows)) for r in got] == [("cpu", "calibration", 4), ("h200", "calibration", 20)]
