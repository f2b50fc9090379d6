"""Notebook 08's serve-sim table and figure from a hand-made result."""

from __future__ import annotations

import pytest

from labkit.results import make_result
from labkit.viz.vllm.serve_sim import plot_serve_sim, serve_sim_table


def _result():
    rows = [
        {"kind": "metric", "arm": "baseline", "gpu": "h100", "metric": "mean_tpot_ms", "unit": "ms",
         "predicted": 30.0, "published": 33.81, "error": (30.0 - 33.81) / 33.81},
        {"kind": "metric", "arm": "baseline", "gpu": "h100", "metric": "mean_ttft_ms", "unit": "ms",
         "predicted": 60_000.0, "published": 137_900.0, "error": (60_000.0 - 137_900.0) / 137_900.0},
        {"kind": "metric", "arm": "pr40143", "gpu": "h100", "metric": "mean_tpot_ms", "unit": "ms",
         "predicted": 25.0, "published": 24.58, "error": (25.0 - 24.58) / 24.58},
        {"kind": "metric", "arm": "baseline", "gpu": "h200", "metric": "mean_tpot_ms", "unit": "ms",
         "predicted": 1.0, "published": 33.81, "error": -0.97},
        {"kind": "metric", "arm": "baseline", "gpu": "h100", "metric": "mean_itl_ms", "unit": "ms",
         "predicted": 29.0, "published": None, "error": None},
        {"kind": "ratio", "arm": "pr40143/baseline", "gpu": "h100", "metric": "output_throughput_ratio",
         "unit": "x", "predicted": 1.2, "published": 1.27, "error": 1.2 / 1.27 - 1},
        {"kind": "phase", "arm": "baseline", "gpu": "h100", "phase": "tail", "steps": 3, "wall_s": 1.0},
    ]
    return make_result("serve_sim", rows, params={"gpu": "h100", "fitted": {}}, source="simulated", size="full")


def test_table_has_units_and_the_named_gpu_only():
    t = serve_sim_table(_result())
    assert t.loc[("baseline", "predicted"), "mean TPOT (ms)"] == 30.0
    assert t.loc[("baseline", "published"), "mean TTFT (s)"] == pytest.approx(137.9)
    assert t.loc[("baseline", "error (%)"), "mean TTFT (s)"] == pytest.approx(100 * (60.0 - 137.9) / 137.9)
    assert t.loc[("pr40143/baseline", "published"), "tok/s after / before (x)"] == 1.27
    assert "mean ITL (ms)" not in t.columns  # not in the published table
    assert t.loc[("pr40143", "predicted"), "mean TPOT (ms)"] == 25.0  # h100's, not h200's


def test_figure_is_labelled_simulated():
    fig = plot_serve_sim(_result())
    assert "simulated" in fig.layout.title.text
    assert len(fig.data) == 2 * 3  # published + predicted per metric panel
    predicted = [tr for tr in fig.data if tr.legendgroup == "predicted"]
    assert all(tr.marker.pattern.shape == "/" for tr in predicted)


def test_nothing_recorded():
    assert serve_sim_table(None).empty
    assert "no serve_sim result" in plot_serve_sim(None).layout.annotations[0].text


def test_speeds_table_one_row_per_input_and_where_its_unit_costs_came_from():
    from labkit.viz.vllm.serve_sim import speeds_table

    def speed(f, t, lo, where=None):
        out = {"factor": f, "ratios": {"tensor_index_int": t, "loop_only": lo}, "rule": "r"}
        return {**out, "calibration": where} if where else out

    new = {"census": speed(0.9, 1.1, 0.7, "in its own run (median over 6 points)"), "inputs": speed(1.0, 1.2, 0.8, "in its own run"),
           "server_host": None, "here": speed(0.8, 1.0, 0.6, "in this run"), "census_machine": "cpu-a", "this_machine": "cpu-a"}
    res = make_result("serve_sim", [], params={"gpu": ["h200", "h100"], "cpu_speed": {"h200": new, "h100": {}}},
                      source="simulated", size="full")
    t = speeds_table(res)
    assert list(t["host input"]) == ["the step census (vllm_step)", "the input processing (vllm_input)",
                                     "the scheduler's calls timed in this run"]
    assert list(t["factor"]) == [0.9, 1.0, 0.8] and t["unit costs divided by"][0].startswith("in its own run")
    assert t["unit-cost ratios (GPU node / here)"][0] == "tensor_index_int 1.1, loop_only 0.7"
    # a run recorded before the rule: two factors, both against the machine's calibration
    old = make_result("serve_sim", [], params={"gpu": "h200", "cpu_speed": {"recorded": speed(1.18, 1.35, 1.03),
                                                                             "measured_here": speed(1.18, 1.35, 1.03)}},
                      source="simulated", size="full")
    t = speeds_table(old)
    assert list(t["host input"]) == ["every recorded host cost", "the scheduler's calls timed in this run"]
    assert set(t["unit costs divided by"]) == {"the machine's calibration (another run)"}
    assert speeds_table(None).empty
