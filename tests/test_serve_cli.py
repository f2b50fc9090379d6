"""``labkit bench serve-sim``'s refusals: one line on stderr and exit 2, before any work."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from labkit.serve.bench import main
from labkit.serve.device import load_device_model


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_one_line_and_exit_2(capsys):
    assert main(["--size", "quick", "--no-save"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vLLM is not installed" in err[0]


def test_bad_arms_exit_2(capsys):
    assert main(["--arms", "baseline,nope", "--no-save"]) == 2
    assert "--arms" in capsys.readouterr().err


def test_no_device_model_is_said_not_made_up(monkeypatch):
    monkeypatch.setitem(sys.modules, "labkit.serve.gpu.device_model", None)  # import fails
    device, why = load_device_model("h200")
    assert device is None and "no device model" in why


def test_device_model_adapter_counts_the_new_token():
    pytest.importorskip("labkit.serve.gpu.device_model")
    from labkit.serve.gpu import device_model as dm
    from labkit.serve.gpu.gemma4_arch import GEMMA4_E4B

    device, why = load_device_model("h200")
    assert "simulated" in why
    expected = dm.step_device_time(GEMMA4_E4B, "h200", dm.StepBatch(decode_contexts=(101, 201),
                                                                   prefill_chunks=(dm.PrefillChunk(50, 0, True),),
                                                                   images_encoded=1)).total_ns
    assert device((100, 200), ((50, 0, True),), 1) == pytest.approx(expected)


def test_the_device_scale_fit_finds_the_factor_where_the_tpot_is_not_proportional_to_it():
    from labkit.errors import UsageError
    from labkit.serve.fit import fit_device_scale

    # a run whose TPOT grows faster than the factor (hand-made: 10 ms at 1, 10 + 20 (k - 1) ms beyond):
    # the published 24 ms needs k = 1.7, not the first guess 24 / 10 = 2.4
    scale, tried = fit_device_scale(lambda k: 10.0 + 20.0 * (k - 1.0), 24.0)
    assert scale == pytest.approx(1.7, rel=0.005)
    assert tried[0] == (1.0, 10.0) and tried[1][0] == pytest.approx(2.4) and len(tried) == 3  # linear: one secant
    # already there at 1: one run, factor 1
    assert fit_device_scale(lambda k: 24.0 * k, 24.0) == (1.0, [(1.0, 24.0)])
    with pytest.raises(UsageError):
        fit_device_scale(lambda k: 0.0, 24.0)
    with pytest.raises(UsageError):
        fit_device_scale(lambda k: 10.0, None)
    with pytest.raises(UsageError, match="after 3 runs"):  # a TPOT the device does not move
        fit_device_scale(lambda k: 10.0 + 0 * k, 24.0, max_runs=3)


def test_the_finish_spread_published_and_predicted():
    from labkit.serve.bench import metric_rows, published_value

    # #40143's table: 413.16 s, mean TTFT 137.9 s, mean TPOT 33.81 ms, 2478.5 tok/s over 128 requests
    # = 8000 tokens each, so the mean E2E latency is 137.9 + 7999 x 0.03381 s
    assert published_value("finish_spread_s", "before") == pytest.approx(413.16 - 137.9 - 7999 * 33.81e-3)
    assert published_value("finish_spread_s", "after") == pytest.approx(325.41 - 124.3 - 7999 * 24.58e-3)
    metrics = dict.fromkeys(("completed", "total_input_tokens", "total_output_tokens", "request_throughput",
                             "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
                             "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
                             "mean_itl_ms"), 1.0)
    metrics.update(duration_s=250.0, mean_e2el_ms=210_000.0)
    row = next(r for r in metric_rows("baseline", "h200", metrics, compare=True) if r["metric"] == "finish_spread_s")
    assert row["predicted"] == pytest.approx(40.0) and row["unit"] == "s"
    assert row["published"] == pytest.approx(413.16 - 137.9 - 7999 * 33.81e-3)


def test_the_host_fit_finds_the_host_where_the_after_arm_turns_host_bound():
    from labkit.errors import UsageError
    from labkit.serve.fit import fit_host_per_request

    # hand-made run of 128 requests: device-bound at 16 ms until the host (10 ms + 128 x ns per
    # request) is longer; the published 24 ms needs (24 - 10) / 128 ms = 109,375 ns per request
    def tpot(ns):
        return max(16.0, 10.0 + 128 * ns / 1e6)

    # from 0 (16 ms, the floor) the next run spreads the missing 8 ms over 128 requests: 62,500 ns,
    # 18 ms, the only run above the floor; once more by the TPOT still missing: 109,375 ns, 24 ms
    ns, tried = fit_host_per_request(tpot, 24.0, first_guess_ns=0.0, requests=128, floor_ms=16.0)
    assert ns == pytest.approx(109_375)
    assert tried == [(0.0, 16.0), (62_500.0, 18.0), (109_375.0, 24.0)]
    # a good first guess: one run
    assert fit_host_per_request(tpot, 24.0, first_guess_ns=109_375.0, requests=128)[1] == [(109_375.0, 24.0)]
    # a TPOT that jitters by 1 ms from run to run: the least-squares line's root after the last run
    jitter = iter([0.6, -0.6, 0.6, -0.6])
    ns, tried = fit_host_per_request(lambda x: tpot(x) + next(jitter), 24.0, first_guess_ns=80_000.0,
                                     requests=128, floor_ms=16.0, tolerance=0.001, max_runs=4)
    assert len(tried) == 4 and ns == pytest.approx(109_375, rel=0.05)
    with pytest.raises(UsageError, match="does not rise"):  # a TPOT the host does not move
        fit_host_per_request(lambda ns: 16.0, 24.0, first_guess_ns=0.0, requests=128, max_runs=3, floor_ms=16.0)
    with pytest.raises(UsageError):
        fit_host_per_request(tpot, None, first_guess_ns=0.0, requests=128)


def test_a_finish_spread_bounds_the_clients_serialization():
    from types import SimpleNamespace

    from labkit.report.answers.vllm import client_start_bound

    # 5 requests, each body 0.5 s to serialize: starts at 0, 0.5, ..., 2 s, a mean delay of 1 s;
    # a spread of 0.8 s allows at most 0.8 / 2 = 0.4 s per body
    res = SimpleNamespace(params={"workload": {"requests": 5},
                                  "per_gpu": {"h200": {"intake_ns_per_request": {"client_serialize": 5e8}}}})
    b = client_start_bound(res, "h200", 0.8)
    assert b == pytest.approx({"serialize_s": 0.5, "mean_start_s": 1.0, "bound_s": 0.4})
    assert client_start_bound(res, "h100", 0.8) is None  # no intake recorded for that GPU


def test_result_names_say_the_fit_and_an_order_other_than_the_measured():
    from labkit.serve.bench import result_name

    assert result_name() == "serve_sim"
    assert result_name("host-per-request") == "serve_sim_host_per_request"
    assert result_name("host-per-request", "side-by-side") == "serve_sim_host_per_request_side_by_side"
    assert result_name(None, "one-after-another") == "serve_sim_one_after_another"
    assert result_name("host-per-request", "media-first", "census") == "serve_sim_host_per_request_census_scheduler"
