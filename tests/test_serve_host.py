"""The PR's table by arithmetic, the census's chain in unit costs, and the PR host's tensor read, by hand.

A hand-made census: two points (8 and 128 requests x 32 images) with every off-host phase of the
baseline and pr40143; its own run's unit costs at each point. At 128: pr40143's engine-core chain
is 9,000 us (6,000 schedule + 3,000 prepare_inputs, the other phases 0), the baseline's 17,000;
unit costs 1,000 ns a tensor read and 5 ns a loop iteration. So the baseline holds
(17,000 - 9,000) us / 1 us = 8,000 tensor reads and 9,000 us / 5 ns = 1.8e6 loop units.
"""

from __future__ import annotations

import json

import pytest

from labkit.errors import UsageError
from labkit.serve.host import UnitCosts, chains_from_census, infer_read_ns, measured_units
from labkit.facts import PR40143, two_phases

PHASES = ("schedule", "prepare_inputs", "encoder", "forward", "sample", "update_from_output", "other",
          "process_outputs")


def _cal(read_ns, loop_ns):
    return [{"variant": "tensor_index_int", "median_ns": read_ns}, {"variant": "loop_only", "median_ns": loop_ns}]


def _census(points=None, in_run=None):
    points = points or {("pr40143", 128): {"schedule": 6000, "prepare_inputs": 3000, "process_outputs": 500},
                        ("baseline", 128): {"schedule": 14000, "prepare_inputs": 3000, "process_outputs": 500},
                        ("pr40143", 8): {"schedule": 600, "prepare_inputs": 300, "process_outputs": 50},
                        ("baseline", 8): {"schedule": 1100, "prepare_inputs": 300, "process_outputs": 50}}
    rows = [{"variant": v, "num_requests": n, "images": 32, "phase": f"off_host:{p}", "median_us": float(ph.get(p, 0))}
            for (v, n), ph in points.items() for p in PHASES]
    rows.append({"variant": "baseline", "num_requests": 128, "images": 32, "phase": "schedule", "median_us": 99.0})
    in_run = in_run or {"128x32": _cal(1000.0, 5.0), "8x32": _cal(500.0, 2.0)}
    return {"rows": rows, "params": {"calibration_in_run": in_run}}


def test_the_published_table_by_arithmetic():
    before, after = two_phases(PR40143.before), two_phases(PR40143.after)
    # output tokens = tok/s x duration = 128 x 8,000 on both sides (to 0.01%)
    assert before["output_tokens_total"] == pytest.approx(2478.5 * 413.16) == pytest.approx(1_024_000, rel=1e-4)
    assert after["output_tokens_total"] == pytest.approx(3146.8 * 325.41) == pytest.approx(1_024_000, rel=1e-4)
    # mean E2EL = mean TTFT + 7,999 x mean TPOT
    assert before["mean_e2el_s"] == pytest.approx(137.9 + 7999 * 0.03381)  # 408.34
    assert after["mean_e2el_s"] == pytest.approx(124.3 + 7999 * 0.02458)  # 320.92
    assert before["finish_spread_s"] == pytest.approx(413.16 - 408.34, abs=0.01)
    assert after["finish_spread_s"] == pytest.approx(325.41 - 320.92, abs=0.01)
    # the fastest full-batch step: 128 tokens at the peak rate
    assert before["fastest_step_ms"] == pytest.approx(128 / 6158 * 1e3)  # 20.79
    assert after["fastest_step_ms"] == pytest.approx(128 / 9088 * 1e3)  # 14.08
    # a few hundred such steps between the average first token and the last one
    assert 200 < before["spread_steps"] < 400 and 200 < after["spread_steps"] < 400
    # the decode phase's mean step is the mean TPOT (the same identity, read the other way)
    assert before["decode_step_ms"] == pytest.approx(33.81, abs=0.01)
    assert before["arrival_s"] == 137.9 and before["decode_s"] == pytest.approx(413.16 - 137.9)


def test_the_chain_in_unit_costs_by_hand():
    ch = chains_from_census(_census(), ["baseline", "pr40143"])
    b, p = ch.counts("baseline", 128), ch.counts("pr40143", 128)
    assert b.reads == pytest.approx(8_000) and b.loops == pytest.approx(1.8e6)
    assert p.reads == 0 and p.loops == pytest.approx(1.8e6)
    assert b.api_loops == pytest.approx(500e3 / 5)  # process_outputs: the API server's, in loop units
    # priced on another host: 8,000 reads x 2 us + 1.8e6 x 4 ns = 16 + 7.2 ms
    other = UnitCosts(2_000.0, 4.0, "elsewhere")
    assert ch.core_ns("baseline", 128, other) == pytest.approx(23.2e6)
    assert ch.core_ns("pr40143", 128, other) == pytest.approx(7.2e6)
    # at 8 requests: (1,400 - 900) us / 0.5 us = 1,000 reads, 900 us / 2 ns = 450,000 loop units; between: linear
    assert ch.counts("baseline", 8).reads == pytest.approx(1_000)
    assert ch.counts("baseline", 68).reads == pytest.approx(4_500)
    assert ch.counts("baseline", 1).reads == pytest.approx(1_000)  # flat outside the points
    assert ch.counts("baseline", 500).reads == pytest.approx(8_000)


def test_a_negative_excess_counts_no_reads_and_is_noted():
    doc = _census(points={("pr40143", 8): {"schedule": 600}, ("baseline", 8): {"schedule": 550}},
                  in_run={"8x32": _cal(500.0, 2.0)})
    ch = chains_from_census(doc, ["baseline"])
    assert ch.counts("baseline", 8).reads == 0 and ch.clipped == (8,)


def test_the_census_must_hold_its_own_unit_costs_and_every_phase():
    with pytest.raises(UsageError, match="calibration_in_run"):
        chains_from_census({"rows": _census()["rows"], "params": {}}, ["baseline"])
    with pytest.raises(UsageError, match="unit costs"):
        chains_from_census(_census(in_run={"128x32": _cal(1000.0, 5.0)}), ["baseline"])  # 8x32 has none
    with pytest.raises(UsageError, match="no point"):
        chains_from_census(_census(), ["merged"])
    with pytest.raises(UsageError, match="no arm"):
        chains_from_census(_census(), ["baseline"]).counts("early-return", 8)


def test_the_pr_hosts_tensor_read_from_the_baselines_peak_by_hand():
    ch = chains_from_census(_census(), ["baseline", "pr40143"])
    # a 25 ms host side: (25 ms - 1.8e6 x 4 ns) / 8,000 reads = 2.225 us a read
    got = infer_read_ns(ch, host_ns=25e6, requests=128, loop_ns=4.0)
    assert got["read_ns"] == pytest.approx(2_225.0)
    with pytest.raises(UsageError, match="loop part"):
        infer_read_ns(ch, host_ns=5e6, requests=128, loop_ns=4.0)


def test_every_unit_cost_measurement_in_the_store(tmp_path):
    (tmp_path / "m1").mkdir()
    (tmp_path / "m1" / "calibration.json").write_text(json.dumps({"rows": _cal(1000.0, 5.0), "params": {}}))
    (tmp_path / "m1" / "vllm_step.json").write_text(json.dumps(_census()))
    (tmp_path / "m1" / "broken.json").write_text("{")
    got = sorted((e["result"], e["where"], e["read_ns"]) for e in measured_units(tmp_path))
    assert got == [("calibration", "calibrate", 1000.0), ("vllm_step", "in its run at 128x32", 1000.0),
                   ("vllm_step", "in its run at 8x32", 500.0)]
