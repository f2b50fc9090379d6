"""The one step model on hand-worked cases, and the places that must take their rule from it.

Async: a step is max(device, host) + what does not overlap; sync: device + host + it. Worked by
hand: device 10, host 4 (device-bound), host 15 (host-bound), host 10 (the crossing).
"""

from __future__ import annotations

import math

import pytest

from labkit.errors import UsageError
from labkit.step_model import both_regimes, peak_tokens_per_s, planned_ahead, step_time


@pytest.mark.parametrize("host, async_step, sync_step, bound, idle", [
    (4.0, 10.0, 14.0, "device", 0.0),   # device-bound: the host hides behind the device
    (15.0, 15.0, 25.0, "host", 5.0),    # host-bound: the device idles 5 a step
    (10.0, 10.0, 20.0, "device", 0.0),  # the crossing: neither side waits
])
def test_both_regimes_by_hand(host, async_step, sync_step, bound, idle):
    got = both_regimes(10.0, host)
    assert got["async"].step_ns == async_step and got["sync"].step_ns == sync_step
    assert got["async"].bound == bound
    assert got["async"].device_idle_ns == idle
    assert got["sync"].device_idle_ns == host  # sync: the device waits the whole host time


def test_the_part_that_does_not_overlap_adds_in_both_regimes():
    assert step_time(10.0, 4.0, "async", non_overlap_ns=1.5).step_ns == 11.5
    assert step_time(10.0, 4.0, "sync", non_overlap_ns=1.5).step_ns == 15.5
    # a host saving shows only where the host was the longer side
    assert step_time(10.0, 15.0).step_ns - step_time(10.0, 9.0).step_ns == 5.0


def test_bad_input_is_a_usage_error():
    for args in ((-1.0, 1.0), (1.0, float("nan")), (1.0, 1.0, "overlapped")):
        with pytest.raises(UsageError):
            step_time(*args)
    with pytest.raises(UsageError):
        peak_tokens_per_s(0.0, 128)


def test_the_host_plans_one_step_ahead_only_under_async():
    assert planned_ahead("async") == 1 and planned_ahead("sync") == 0


@pytest.mark.parametrize("step_ms, expected", [
    (14.08, 128 * 72),  # 71.02 steps a second: some one-second bucket holds 72 of them
    (20.0, 128 * 50),   # exactly 50 a second
    (1000.0, 128),      # one step a second
])
def test_peak_is_the_fullest_one_second_bucket(step_ms, expected):
    assert peak_tokens_per_s(step_ms * 1e6, 128) == expected


def test_peak_matches_vllm_bench_serves_buckets_on_a_steady_run():
    step = 0.01408
    tokens = [[0.3 + k * step for k in range(2000)] for _ in range(4)]  # 4 requests in lockstep
    # vllm bench serve: tokens counted into one-second buckets from the run's start, the fullest reported
    buckets: dict = {}
    for t in (t for ts in tokens for t in ts):
        buckets[int(t)] = buckets.get(int(t), 0) + 1
    assert max(buckets.values()) == peak_tokens_per_s(step * 1e9, 4) == 4 * math.ceil(1 / step)


def test_the_mini_engine_follows_the_step_model():
    """The simulated engine under full CUDA graphs (vLLM's regime), fixed host costs: its step is
    the model's in both regimes, device-bound and host-bound (within the few us of the replay
    and the copies that the device starts on before the host is done)."""
    from labkit.engine.config import EngineConfig
    from labkit.engine.device.hostcost import FixedHostCosts, make_fixed_cost_device
    from labkit.engine.device.profiles import parametric_profile
    from labkit.engine.loop import Engine, summarize_run

    bounds = []
    for schedule_us in (50.0, 5_000.0):
        for regime in ("async", "sync"):
            cfg = EngineConfig(workload="quick", num_requests=8, async_scheduling=regime == "async", cudagraph="full")
            eng = Engine(cfg, make_fixed_cost_device(parametric_profile()),
                         host_costs=FixedHostCosts(schedule_ns={"*": schedule_us * 1e3}))
            eng.run(12)
            row = summarize_run(eng, warmup_steps=3)
            host = sum(row[f"host_{p}_ns"] for p in ("schedule", "prepare", "forward", "sample"))
            model = step_time(row["device_busy_per_step_ns"], host, regime)
            assert row["median_ns"] == pytest.approx(model.step_ns, rel=0.04), (schedule_us, regime)
            bounds.append(model.bound)
    assert bounds == ["device", "device", "host", "host"]
