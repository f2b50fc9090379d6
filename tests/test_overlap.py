"""The bubble model: hand-worked step times and the comparison with #40143's published table."""

from __future__ import annotations

import pytest

from labkit.errors import UsageError
from labkit.mm.overlap import PR40143, compare_with_published, predict_step, sweep_host_time


def test_sync_adds_async_overlaps():
    s = predict_step(3.0, 5.0, 10, mode="sync")
    assert s.step_ms == 8.0 and s.bubble_ms == 3.0 and s.output_tok_s == pytest.approx(1250.0)
    a = predict_step(3.0, 5.0, 10, mode="async", non_overlap_ms=0.5)
    assert a.step_ms == 5.5 and not a.host_bound and a.bubble_ms == pytest.approx(0.5)
    h = predict_step(9.0, 5.0, 128, mode="async", non_overlap_ms=1.0)
    assert h.step_ms == 10.0 and h.host_bound and h.bubble_ms == 5.0
    assert h.output_tok_s == pytest.approx(12800.0)
    assert h.tpot_ms == h.step_ms


def test_sweep_rows():
    rows = sweep_host_time([0.0, 10.0], 5.0, 1)
    assert [(r["mode"], r["step_ms"]) for r in rows] == [("sync", 5.0), ("sync", 15.0), ("async", 5.0), ("async", 10.0)]


def test_bad_inputs():
    with pytest.raises(UsageError):
        predict_step(1, 1, mode="overlapped")
    with pytest.raises(UsageError):
        predict_step(-1, 1)
    with pytest.raises(UsageError):
        compare_with_published(1.0, non_overlap_ms=30.0)
    with pytest.raises(UsageError):
        compare_with_published(-1.0)


def test_published_numbers_are_consistent():
    # output tokens = tok/s x duration: 1,024,000 (128 requests x 8000) before and after
    assert PR40143.output_tok_s_before * PR40143.duration_s_before == pytest.approx(1_024_000, rel=1e-3)
    assert PR40143.output_tok_s_after * PR40143.duration_s_after == pytest.approx(1_024_000, rel=1e-3)
    assert PR40143.tpot_saving_ms == pytest.approx(9.23)
    assert PR40143.throughput_gain == pytest.approx(1.27, abs=0.005)


def test_full_saving_explains_it_exactly():
    c = compare_with_published(9.23, non_overlap_ms=1.0)
    assert c.implied_device_ms == pytest.approx(23.58)
    assert c.implied_host_before_ms == pytest.approx(32.81)
    assert c.predicted_tpot_after_async_ms == pytest.approx(24.58)
    assert c.error_async_ms == pytest.approx(0.0, abs=1e-9)
    assert c.explained_fraction == pytest.approx(1.0)
    assert c.predicted_output_tok_s_after == pytest.approx(2478.5 * 33.81 / 24.58)


def test_partial_saving_hand_worked():
    c = compare_with_published(5.0, non_overlap_ms=1.0)
    # async: max(32.81 - 5, 23.58) + 1 = 28.81; sync: 33.81 - 5
    assert c.predicted_tpot_after_async_ms == pytest.approx(28.81)
    assert c.predicted_tpot_after_sync_ms == pytest.approx(28.81)
    assert c.error_async_ms == pytest.approx(4.23)
    assert c.error_async_pct == pytest.approx(100 * 4.23 / 24.58)
    assert c.explained_fraction == pytest.approx(5.0 / 9.23)
    # a bigger saving cannot go below the device time in the async model
    big = compare_with_published(20.0, non_overlap_ms=1.0)
    assert big.predicted_tpot_after_async_ms == pytest.approx(24.58)
    assert big.predicted_tpot_after_sync_ms == pytest.approx(13.81)
    # host_scale multiplies the saving
    assert compare_with_published(2.5, host_scale=2.0).host_saving_ms == pytest.approx(5.0)


def test_long_table():
    rows = compare_with_published(5.0, non_overlap_ms=1.0).as_rows()
    by = {r["quantity"]: r for r in rows}
    assert by["tpot_after_ms (async)"]["published"] == 24.58
    assert by["tpot_after_ms (async)"]["error_pct"] == pytest.approx(100 * 4.23 / 24.58)


class _Res:
    def __init__(self, name, source, rows, slug="m"):
        self.name, self.source, self.rows, self.machine = name, source, rows, {"slug": slug}


def test_device_step_of_a_row():
    from labkit.mm.overlap import device_step_ms

    assert device_step_ms({"device_busy_per_step_ns": 12_500_000}) == pytest.approx(12.5)
    assert device_step_ms({"median_ns": 20_000_000, "device_idle_frac": 0.25}) == pytest.approx(15.0)
    assert device_step_ms({"median_ns": 20_000_000}) is None


def test_graph_device_step_prefers_full_graphs_measured_and_after_fix_rows():
    from labkit.mm.overlap import graph_device_step

    eager = _Res("engine", "measured-gpu", [{"variant": "fast/cursor/none/async", "cudagraph": "none",
                                             "cudagraph_run": "none", "median_ns": 30e6, "device_idle_frac": 0.7}])
    assert graph_device_step([eager], 23.58).source == "published"  # no graph run recorded: the fallback
    sim = _Res("engine_sim", "simulated", [
        {"variant": "fast/cursor/none/async/full", "cudagraph": "full", "cudagraph_run": "full",
         "device_busy_per_step_ns": 11e6},
        {"variant": "fast/cursor/per_layer/async/full", "cudagraph": "full", "cudagraph_run": "piecewise",
         "device_busy_per_step_ns": 14e6}])
    s = graph_device_step([eager, sim], 23.58)
    assert (s.device_ms, s.source) == (pytest.approx(11.0), "simulated") and "fast/cursor/none" in s.origin
    gpu = _Res("engine", "measured-gpu", [
        {"variant": "tensor/loop/none/async/full", "cudagraph": "full", "cudagraph_run": "full",
         "median_ns": 20e6, "device_idle_frac": 0.5},
        {"variant": "fast/cursor/none/async/full", "cudagraph": "full", "cudagraph_run": "full",
         "median_ns": 10.4e6, "device_idle_frac": 0.04}], slug="h200")
    g = graph_device_step([sim, gpu], 23.58)
    assert g.source == "measured-gpu" and g.device_ms == pytest.approx(10.4 * 0.96) and "h200" in g.origin
    gpu.size = "quick"  # quick runs are not recorded results
    assert graph_device_step([gpu], 23.58).source == "published"
    assert graph_device_step([gpu], 23.58, include_quick=True).source == "measured-gpu"
