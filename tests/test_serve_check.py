"""serve-sim's check against vLLM's own server, the overlap's reading and the PR table's inference, on hand-worked cases."""

from __future__ import annotations

import json

import pytest

from labkit.errors import UsageError
from labkit.serve.bench_serve_sim import gain_rows, host_at_peak, non_overlap_ns
from labkit.serve.check import first_request_margin, measured_metrics, peak_range, run_costs
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
    rows = [{"arm": "baseline", "gpu": "h200", "metric": "output_tok_s", "predicted": 2000.0},
            {"arm": "pr40143", "gpu": "h200", "metric": "output_tok_s", "predicted": 2500.0},
            {"arm": "baseline", "gpu": "h200", "metric": "mean_tpot_ms", "predicted": 30.0},
            {"arm": "pr40143", "gpu": "h200", "metric": "mean_tpot_ms", "predicted": 20.0}]
    got = {r["metric"]: r for r in gain_rows(rows, ["h200"])}
    assert set(got) == {"gain_output_tok_s", "gain_mean_tpot_ms"}  # no peak rows given, no peak gain
    assert got["gain_output_tok_s"]["predicted"] == pytest.approx(1.25)
    assert got["gain_mean_tpot_ms"]["predicted"] == pytest.approx(1.5)  # a time: before over after
    # the published table's own ratios: 3146.8 / 2478.5 and 33.81 / 24.58
    assert got["gain_output_tok_s"]["published"] == pytest.approx(1.2696, abs=1e-4)
    assert got["gain_mean_tpot_ms"]["published"] == pytest.approx(1.3755, abs=1e-4)
    assert got["gain_output_tok_s"]["error"] == pytest.approx(1.25 / (3146.8 / 2478.5) - 1)
    assert PR40143.after.peak_output_tok_s / PR40143.before.peak_output_tok_s == pytest.approx(1.476, abs=1e-3)


# -- the check's readings of a server run -----------------------------------------------------------

def test_peak_range_by_hand():
    # 10 tokens 0.05 s apart from 0.5 s: one bucket holds all ten or they split 5 and 5
    token_s = [[0.5 + 0.05 * k for k in range(10)]]
    assert peak_range(token_s) == [5, 10]


def test_first_request_margin_by_hand():
    # steps start at 0..9; prefill in 0-5; the first request's first token at 2, its finish at 7.5
    steps = [(float(t), t <= 5) for t in range(10)]
    assert first_request_margin(2.0, 7.5, steps) == {"prefill_steps_after_first_token": 4, "steps_to_finish": 6}


def _run_rows():
    # two requests of 2 images, 8 media workers: bodies in at 1 and 3 s (parse 1.5 s a request by the
    # last one); the pool busy 3.0-4.0 s for 4 images (8 x 1.0 / 4 = 2 s per image and worker); the
    # processor 1 s, then 1.01 s, the last handover at 6.01 s
    intake = [
        {"handler_s": 1.0, "images": 2, "media_start_s": 3.0, "media_end_s": 3.5, "media_busy_ms": 800.0,
         "processor_start_s": 4.0, "processor_end_s": 5.0, "handover_s": 5.0},
        {"handler_s": 3.0, "images": 2, "media_start_s": 3.2, "media_end_s": 4.0, "media_busy_ms": 900.0,
         "processor_start_s": 5.0, "processor_end_s": 6.01, "handover_s": 6.01}]
    # steps back to back from 6.0 s: the device 10 ms + 0.1 ms a prompt token + 5 ms an image + 1 ms a
    # decode, twice that for the one step that starts before the last handover (the intake working);
    # the host 1 ms + 0.5 ms a request in the step
    steps, t = [], 6.0
    for ctx, enc, gen in [(100, 1, 0), (200, 0, 1), (0, 0, 2), (300, 2, 1), (50, 1, 2), (0, 0, 3)]:
        dev = (10 + 0.1 * ctx + 5 * enc + gen) / 1e3 * (2 if t < 6.01 else 1)
        host = (1 + 0.5 * ((ctx > 0) + gen)) / 1e3
        steps.append({"ctx_tokens": ctx, "encoder_inputs": enc, "gen_requests": gen, "ctx_requests": int(ctx > 0),
                      "start_s": t, "end_s": t + dev + host, "host_ms": host * 1e3, "encoder_tokens": 260 * enc})
        t += dev + host
    return intake, steps


def test_run_costs_by_hand():
    intake, steps = _run_rows()
    costs = run_costs(intake, steps, media_threads=8)
    i = costs["intake"]
    assert i.parse_ns == pytest.approx(1.5e9) and i.image_ns == pytest.approx(2e9)
    assert i.process_ns == pytest.approx(1.005e9) and i.process_each_ns == pytest.approx((1e9, 1.01e9))
    assert i.arrivals_ns == pytest.approx((1e9, 3e9))
    d = costs["device_ns"]
    assert d["base"] == pytest.approx(10e6, rel=1e-6) and d["ctx_tokens"] == pytest.approx(0.1e6, rel=1e-6)
    assert d["encoder_inputs"] == pytest.approx(5e6, rel=1e-6) and d["gen_requests"] == pytest.approx(1e6, rel=1e-6)
    assert costs["intake_slows_device"] == pytest.approx(2.0)
    assert costs["host_ns"]["base"] == pytest.approx(1e6, rel=1e-6)
    assert costs["host_ns"]["per_request"] == pytest.approx(0.5e6, rel=1e-6)
    assert costs["encoder_budget"] == 520


def test_run_costs_needs_the_timers():
    _, steps = _run_rows()
    with pytest.raises(UsageError, match="timers"):
        run_costs([], steps, 8)


def test_measured_metrics_are_what_the_bench_reported():
    rows = [{"finish_s": 10.0}, {"finish_s": 12.5}]
    rep = {"mean_ttft_ms": 1500.0, "mean_tpot_ms": 20.0, "duration": 12.6, "output_throughput": 10.0,
           "max_output_tokens_per_s": 30.0}
    got = measured_metrics(rows, rep)
    assert got == {"mean_ttft_s": 1.5, "finish_spread_s": 2.5, "mean_tpot_ms": 20.0, "duration_s": 12.6,
                   "output_tok_s": 10.0, "peak_output_tok_s": 30.0}
    with pytest.raises(UsageError, match="mean_tpot_ms"):
        measured_metrics(rows, {k: v for k, v in rep.items() if k != "mean_tpot_ms"})


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
