"""The timing helper's statistics, with a fake clock whose samples are known in advance."""

from __future__ import annotations

import pytest

from labkit import timing
from labkit.timing import Timing, quantile, summarize, time_host


class FakeClock:
    """``perf_counter_ns`` stand-in: each call to the timed function advances by the next step."""

    def __init__(self, steps_ns):
        self.now = 0
        self.steps = list(steps_ns)

    def __call__(self) -> int:
        return self.now

    def work(self):
        self.now += self.steps.pop(0)


def test_quantile_by_hand():
    s = [10.0, 20.0, 30.0, 40.0, 50.0]
    assert quantile(s, 0.5) == 30.0
    assert quantile(s, 0.0) == 10.0 and quantile(s, 1.0) == 50.0
    assert quantile(s, 0.2) == pytest.approx(18.0)   # pos 0.8 between 10 and 20
    assert quantile(s, 0.8) == pytest.approx(42.0)   # pos 3.2 between 40 and 50
    assert quantile([7.0], 0.3) == 7.0
    with pytest.raises(ValueError):
        quantile([], 0.5)
    with pytest.raises(ValueError):
        quantile(s, 1.5)


def test_summarize_sorts_and_averages():
    t = summarize([40, 10, 30, 20], number=5, method="x")
    # sorted 10 20 30 40: median pos 1.5 -> 25; p20 pos 0.6 -> 16; p80 pos 2.4 -> 34
    assert (t.median_ns, t.p20_ns, t.p80_ns) == pytest.approx((25.0, 16.0, 34.0))
    assert t.mean_ns == 25.0 and t.min_ns == 10.0
    assert (t.repeats, t.number, t.method) == (4, 5, "x")
    row = t.as_row()
    assert row["median_ns"] == 25.0 and row["repeats"] == 4
    assert t.median_us == pytest.approx(0.025)


def test_time_host_with_fake_clock(monkeypatch):
    warmup = [999, 999]                       # never counted
    samples = [100, 300, 200, 500, 400]       # one call per sample
    clock = FakeClock(warmup + samples)
    monkeypatch.setattr(timing.time, "perf_counter_ns", clock)
    t = time_host(clock.work, warmup=2, repeats=5)
    assert clock.steps == []
    assert t.median_ns == 300.0
    assert t.p20_ns == pytest.approx(180.0)   # sorted 100..500, pos 0.8
    assert t.p80_ns == pytest.approx(420.0)   # pos 3.2
    assert t.min_ns == 100.0 and t.mean_ns == 300.0
    assert t.method == "perf_counter_ns"


def test_time_host_divides_by_number_and_runs_setup_untimed(monkeypatch):
    # 3 samples x 4 calls; per-sample totals 400, 800, 1200 -> per call 100, 200, 300
    steps = [100] * 4 + [200] * 4 + [300] * 4
    clock = FakeClock(steps)
    monkeypatch.setattr(timing.time, "perf_counter_ns", clock)
    setups = []

    def setup():
        setups.append(1)
        clock.now += 10_000                   # slow setup must not be timed

    t = time_host(clock.work, warmup=0, repeats=3, number=4, setup=setup)
    assert len(setups) == 3
    assert (t.min_ns, t.median_ns) == (100.0, 200.0)
    assert t.number == 4


def test_time_host_rejects_bad_counts():
    with pytest.raises(ValueError):
        time_host(lambda: None, repeats=0)
    with pytest.raises(ValueError):
        time_host(lambda: None, number=0)
    with pytest.raises(ValueError):
        time_host(lambda: None, warmup=-1)


def test_auto_number_targets_sample_length(monkeypatch):
    clock = FakeClock([1000])
    monkeypatch.setattr(timing.time, "perf_counter_ns", clock)
    assert timing.auto_number(clock.work, target_ns=200_000) == 200
    clock = FakeClock([10])
    monkeypatch.setattr(timing.time, "perf_counter_ns", clock)
    assert timing.auto_number(clock.work, target_ns=200_000, cap=50) == 50


def test_timing_is_frozen():
    t = summarize([1, 2, 3])
    with pytest.raises(Exception):
        t.median_ns = 0  # type: ignore[misc]
    assert isinstance(t, Timing)
