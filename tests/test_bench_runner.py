"""The one bench runner (``labkit.bench``) on a toy spec worked by hand: axes x variants, quick and
full values, the ratios, the result made and saved in a temporary store, the table and ``--json``."""

from __future__ import annotations

import argparse
import json

import pytest

from labkit.bench import Bench, add_ratios, add_run_options, report, resolve_run_options
from labkit.errors import UsageError
from labkit.results import CALIBRATION, load_results
from labkit.timing import Timing

#: the toy's cost: n items at 10 ns each (slow) or 4 ns each (fast), plus a fixed 20 ns
COST = {"slow": 10.0, "fast": 4.0}


def _toy(**kw) -> Bench:
    def measure(variant, n, repeats):
        ns = 20.0 + COST[variant] * n
        return Timing(ns, ns, ns, ns, ns, repeats, 1, "perf_counter_ns")

    return Bench(CALIBRATION, axes={"n": ((1, 10), (1, 10, 100))}, line_vals=("slow", "fast"), measure=measure,
                 knobs={"repeats": (3, 9)}, ratios={"speedup_vs_slow": "slow"}, params={"toy": True}, **kw)


def test_quick_and_full_values_and_what_is_given_in_their_place():
    spec = _toy()
    assert spec.at("quick") == {"n": (1, 10), "repeats": 3}
    assert spec.at("full") == {"n": (1, 10, 100), "repeats": 9}
    assert spec.at("full", n=(7,), repeats=None) == {"n": (7,), "repeats": 9}  # None: the preset
    assert spec.points("full") == [{"n": 1}, {"n": 10}, {"n": 100}]
    with pytest.raises(UsageError, match="unknown size"):
        spec.at("huge")


def test_sweep_rows_are_every_point_times_every_variant_with_ratios_worked_by_hand():
    rows = _toy().sweep("quick")
    got = [(r["n"], r["variant"], r["median_ns"], r["repeats"], r["speedup_vs_slow"]) for r in rows]
    # n=1: slow 30 ns, fast 24 ns (30/24 = 1.25); n=10: slow 120, fast 60 (2.0)
    assert got == [(1, "slow", 30.0, 3, 1.0), (1, "fast", 24.0, 3, 1.25),
                   (10, "slow", 120.0, 3, 1.0), (10, "fast", 60.0, 3, 2.0)]
    assert [r["n"] for r in _toy().sweep("full")] == [1, 1, 10, 10, 100, 100]


def test_a_measure_returning_a_callable_is_timed_by_the_runner():
    calls = []
    spec = Bench(CALIBRATION, axes={"n": ((2,), (2,))}, line_vals=("a",), knobs={"repeats": (4, 4), "warmup": (1, 1)},
                 measure=lambda variant, n, repeats, warmup: lambda: calls.append(n))
    (row,) = spec.sweep("quick")
    assert (row["variant"], row["n"], row["repeats"], row["method"]) == ("a", 2, 4, "perf_counter_ns")
    assert len(calls) == 1 + 4  # one warm-up call, then one per sample


def test_ratios_only_where_asked_and_none_without_a_base():
    rows = [{"kind": "k", "variant": "base", "x": 1, "median_ns": 8.0}, {"kind": "k", "variant": "b", "x": 1, "median_ns": 2.0},
            {"kind": "k", "variant": "b", "x": 2, "median_ns": 2.0}, {"kind": "other", "variant": "b", "x": 1, "median_ns": 1.0}]
    add_ratios(rows, "base", "vs_base", over=("x",), where={"kind": "k"})
    assert [r.get("vs_base", "absent") for r in rows] == [1.0, 4.0, None, "absent"]


def _args(argv):
    p = argparse.ArgumentParser()
    add_run_options(p)
    return p.parse_args(argv)


def test_run_saves_the_result_and_report_prints_one_table_and_writes_json(results_store, tmp_path, capsys):
    out = tmp_path / "toy.json"
    args = _args(["--size", "full", "--json", str(out)])
    size = resolve_run_options(args)
    res = _toy(columns=("n", "variant", "median_ns", "speedup_vs_slow")).run(size, save=True)
    (saved,) = load_results()
    assert (saved.name, saved.size, saved.complete, saved.params["size"], saved.params["toy"]) == (
        "calibration", "full", True, "full", True)
    assert len(saved.rows) == 6 and saved.rows[-1]["speedup_vs_slow"] == pytest.approx(1020 / 420)
    report(args, res, ("n", "variant", "median_ns", "speedup_vs_slow"))
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "calibration (measured-cpu):"
    assert text[1].split() == ["n", "variant", "median", "(ns)", "speedup", "vs", "slow"]
    assert text[2].split() == ["1", "slow", "30", "1x"] and text[-3].split() == ["100", "fast", "420", "2.43x"]
    assert text[-2] == f"saved {saved.path}" and text[-1] == f"wrote {out}"
    assert json.loads(out.read_text())["rows"] == saved.rows


def test_no_save_keeps_the_store_untouched_and_quick_is_filed_as_quick(results_store, capsys):
    args = _args(["--no-save"])
    res = _toy().run(resolve_run_options(args), save=not args.no_save)
    assert res.name == "calibration_quick" and res.size == "quick"
    report(args, res)
    assert not results_store.exists() and "saved" not in capsys.readouterr().out
