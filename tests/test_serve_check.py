"""The overlap's reading, the PR table's inference and gains, and the server's timers read back, on hand-worked cases."""

from __future__ import annotations

import json

import pytest

from labkit.errors import UsageError
from labkit.serve.bench_serve_sim import gain_rows, host_at_peak, non_overlap_ns
from labkit.facts import PR40143
from labkit.vllm.census.bench_vllm_overlap import reading
from labkit.vllm.server.timeline import intake_rows, step_clock


# -- the overlap's reading: which side sets a step, and what neither hides -------------------------

def test_reading_device_bound():
    got = reading(step_ms=20.2, forward_ms=20.0, host_ms=7.7)
    assert got["bound"] == "device" and got["non_overlap_ms"] == pytest.approx(0.2)
    assert got["serial_excess_ms"] == pytest.approx(-7.5)  # far less than forward + host: overlapped


def test_reading_host_bound():
    got = reading(step_ms=8.0, forward_ms=5.0, host_ms=7.7)
    assert got["bound"] == "host" and got["non_overlap_ms"] == pytest.approx(0.3)


def test_reading_at_the_crossing_and_serial():
    # forward = host: device-bound by the rule, a step of 2x means nothing overlapped
    got = reading(step_ms=20.0, forward_ms=10.0, host_ms=10.0)
    assert got["bound"] == "device" and got["non_overlap_ms"] == pytest.approx(10.0)
    assert got["serial_excess_ms"] == pytest.approx(0.0)


def test_non_overlap_term_per_regime():
    doc = {"rows": [
        {"regime": "async", "forward_ms": 0.0, "non_overlap_ms": 0.0, "serial_excess_ms": 0.0},
        {"regime": "async", "forward_ms": 5.0, "non_overlap_ms": 0.1, "serial_excess_ms": -4.0},
        {"regime": "async", "forward_ms": 10.0, "non_overlap_ms": 0.3, "serial_excess_ms": -4.0},
        {"regime": "async", "forward_ms": 20.0, "non_overlap_ms": 0.2, "serial_excess_ms": -4.0},
        {"regime": "sync", "forward_ms": 5.0, "non_overlap_ms": 4.0, "serial_excess_ms": 0.5},
        {"regime": "sync", "forward_ms": 10.0, "non_overlap_ms": 4.0, "serial_excess_ms": 0.7}]}
    assert non_overlap_ns(doc, "async") == pytest.approx(0.2e6)  # the forward-0 row left out
    assert non_overlap_ns(doc, "sync") == pytest.approx(0.6e6)
    with pytest.raises(UsageError):
        non_overlap_ns({"rows": []}, "async")


# -- the PR host from the published peak ------------------------------------------------------------

def test_host_at_peak_by_hand():
    # a 20 ms host-bound step beside a 12 ms device, 1 ms that neither hides
    assert host_at_peak(20e6, 12e6, "async", 1e6) == pytest.approx(19e6)
    assert host_at_peak(20e6, 12e6, "sync", 1e6) == pytest.approx(7e6)
    with pytest.raises(UsageError, match="not host-bound"):
        host_at_peak(10e6, 12e6, "async", 0.0)


def test_gain_rows_by_hand():
    rows = [{"arm": "baseline", "gpu": "h200", "metric": "peak_output_tok_s", "predicted": 6000.0},
            {"arm": "pr40143", "gpu": "h200", "metric": "peak_output_tok_s", "predicted": 9000.0},
            {"arm": "baseline", "gpu": "h200", "metric": "output_tok_s", "predicted": None},
            {"arm": "pr40143", "gpu": "h200", "metric": "output_tok_s", "predicted": None}]
    got = {r["metric"]: r for r in gain_rows(rows, ["h200"])}
    assert set(got) == {"gain_output_tok_s", "gain_peak_output_tok_s", "gain_mean_tpot_ms"}
    assert got["gain_peak_output_tok_s"]["predicted"] == pytest.approx(1.5)
    # the published peak ratio: 9088 / 6158
    assert got["gain_peak_output_tok_s"]["error"] == pytest.approx(1.5 / (9088 / 6158) - 1)
    # not predicted: the published ratio kept, no prediction and no error
    for m in ("gain_output_tok_s", "gain_mean_tpot_ms"):
        assert got[m]["predicted"] is None and got[m]["error"] is None
    # the published table's own ratios: 3146.8 / 2478.5 and 33.81 / 24.58
    assert got["gain_output_tok_s"]["published"] == pytest.approx(1.2696, abs=1e-4)
    assert got["gain_mean_tpot_ms"]["published"] == pytest.approx(1.3755, abs=1e-4)
    assert PR40143.after.peak_output_tok_s / PR40143.before.peak_output_tok_s == pytest.approx(1.476, abs=1e-3)


# -- the server's timers read back --------------------------------------------------------------------

def test_intake_rows_and_step_clock_from_the_timers(tmp_path):
    t0 = 100.0
    api = [{"id": 0, "handler_s": 100.5, "media": [[100.6, 100.6, 101.0], [100.6, 100.7, 101.2]],
            "processor": [[101.2, 101.3, 102.0]], "handover_s": 102.1, "first_output_s": 103.0, "finish_s": 104.0},
           {"id": 1, "handler_s": 100.6, "media": [], "processor": []}]  # failed before the engine: left out
    (tmp_path / "api-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in api))
    (tmp_path / "core-2.jsonl").write_text(json.dumps(
        {"schedule_s": [102.2, 102.201], "update_s": [102.9, 102.902], "tokens": 12, "requests": 1}) + "\n")
    rows = intake_rows(tmp_path, t0)
    assert len(rows) == 1
    r = rows[0]
    assert r["handler_s"] == pytest.approx(0.5) and r["media_start_s"] == pytest.approx(0.6)
    assert r["media_end_s"] == pytest.approx(1.2) and r["media_busy_ms"] == pytest.approx(900.0)
    assert (r["processor_queued_s"], r["processor_start_s"], r["processor_end_s"]) == pytest.approx((1.2, 1.3, 2.0))
    assert r["handover_s"] == pytest.approx(2.1) and r["images"] == 2
    steps = [{"iteration": 0, "ctx_tokens": 10, "gen_tokens": 2}]
    step_clock(steps, tmp_path, t0)
    assert steps[0]["start_s"] == pytest.approx(2.2) and steps[0]["end_s"] == pytest.approx(2.902)
    assert steps[0]["host_ms"] == pytest.approx(3.0)
    with pytest.raises(UsageError, match="tokens"):
        step_clock([{"iteration": 0, "ctx_tokens": 11, "gen_tokens": 2}], tmp_path, t0)
    with pytest.raises(UsageError, match="not one run"):
        step_clock(steps * 2, tmp_path, t0)
    with pytest.raises(UsageError, match="no timers folder"):
        intake_rows(tmp_path / "missing", t0)
