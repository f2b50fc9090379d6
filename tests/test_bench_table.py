"""The shared table formatter: units from the column suffixes, three significant figures, no index,
no empty column, long tables folded."""

from __future__ import annotations

import math

import pandas as pd

from labkit.bench import format_table, sig3, time_unit


def test_sig3_rounds_to_three_significant_figures_without_exponents():
    assert sig3(11739.049327) == "11,700"
    assert sig3(0.0012345) == "0.00123"
    assert sig3(5.0) == "5" and sig3(0.5) == "0.5"
    assert sig3(6.9965) == "7.00" and sig3(0.6004554) == "0.600"  # zeros that rounding made are significant
    assert sig3(1400 * 1e-3) == "1.4"  # 1.4000000000000001: a unit's conversion rounds nothing away
    assert sig3(5.707065) == "5.71"
    assert sig3(-42.06) == "-42.1"
    assert sig3(float("nan")) == "" and sig3(None) == ""
    assert sig3(4096) == "4,096" and sig3(True) == "yes"


def test_time_unit_is_the_largest_the_median_reaches():
    assert time_unit([6_166_022.0, 1_080_419.0, 21_402.0]) == ("ms", 1e6)  # median 1.08 ms
    assert time_unit([21_402.0, 84_496.0]) == ("us", 1e3)
    assert time_unit([450.0]) == ("ns", 1.0)


def test_ns_columns_in_ms_with_unit_in_header_and_speedups_as_x():
    rows = [{"combo": "tensor+loop", "median_ns": 6_166_022.0, "speedup_vs_before": 1.0},
            {"combo": "list+loop", "median_ns": 1_080_419.0, "speedup_vs_before": 5.707065499588586},
            {"combo": "list+cursor", "median_ns": 21_482.0, "speedup_vs_before": 287.03}]
    t = format_table(rows)
    assert t.headers == ("combo", "median (ms)", "speedup vs before")
    assert t.cells[0] == ("tensor+loop", "6.17", "1x")
    assert t.cells[1] == ("list+loop", "1.08", "5.71x")
    assert t.cells[2] == ("list+cursor", "0.0215", "287x")


def test_fraction_and_pct_columns_as_percent():
    t = format_table([{"variant": "per_layer", "idle_fraction": 0.9744676, "error_async_pct": 16.86085}])
    assert t.headers == ("variant", "idle fraction (%)", "error async (%)")
    assert t.cells[0] == ("per_layer", "97.4", "16.9")


def test_no_index_no_empty_columns_and_rename_keeps_the_unit():
    df = pd.DataFrame({"case": ["a", "b"], "empty": [math.nan, None], "host_saving_ms": [5.0856, 9.23]},
                      index=[7, 8])
    t = format_table(df, rename={"host_saving_ms": "host saved per step"})
    assert t.headers == ("case", "host saved per step (ms)")
    html = t._repr_html_()
    assert ">7<" not in html and ">8<" not in html  # no index
    assert "empty" not in html
    assert "5.09" in html and "9.23" in html


def test_columns_pick_and_order_and_absent_ones_are_skipped():
    t = format_table([{"a": 1, "b": 2, "c": 3}], columns=["c", "a", "zz"])
    assert t.headers == ("c", "a") and t.cells == (("3", "1"),)


def test_long_tables_fold_after_max_rows():
    rows = [{"i": i} for i in range(25)]
    html = format_table(rows)._repr_html_()
    first, _, folded = html.partition("<details>")
    assert first.count("<tr>") == 11  # header + 10 rows
    assert "all 25 rows" in folded and folded.count("<tr>") == 26
    short = format_table(rows[:10])._repr_html_()
    assert "<details>" not in short


def test_numbers_align_right_and_text_left():
    html = format_table([{"name": "a", "median_ns": 1.5e6, "speedup": 2.0}, {"name": "b", "median_ns": 2e6, "speedup": 3.0}])._repr_html_()
    assert ">a</td>" in html and 'text-align:left">a</td>' in html
    assert 'text-align:right">1.5</td>' in html and 'text-align:right">2x</td>' in html


def test_rates_are_not_read_as_seconds():
    t = format_table([{"output_tok_s": 5600.49, "tokens_per_s_median": 205.3, "duration_s": 12.345}])
    assert t.headers == ("output tok/s", "tokens per s median", "duration (s)")
    assert t.cells[0] == ("5,600", "205", "12.3")


def test_one_time_unit_for_columns_compared_side_by_side():
    rows = [{"a_ms": 0.28, "b_ms": 4.13}, {"a_ms": 0.783, "b_ms": 4.13}, {"a_ms": 1.25, "b_ms": 1.52}]
    assert format_table(rows).headers == ("a (us)", "b (ms)")  # each column's own median: 0.783 ms, 4.13 ms
    t = format_table(rows, time_unit="ms")
    assert t.headers == ("a (ms)", "b (ms)") and t.cells[0] == ("0.28", "4.13")
