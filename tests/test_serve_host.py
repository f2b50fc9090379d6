"""The census's host phases interpolated over requests, the CPU-speed factor, the host model."""

from __future__ import annotations

import math

import pytest

from labkit.errors import UsageError
from labkit.serve.clock import StepRecord
from labkit.serve.host.cpu_speed import cpu_speed_from_rows
from labkit.serve.device import StepShape
from labkit.serve.host.host_census import PHASES, census_host_from_rows, interpolate
from labkit.serve.host.host_model import ServeHost


def _rows(variant="baseline", images=32):
    rows = []
    for n, scale in ((1, 1.0), (8, 8.0), (32, 20.0), (128, 50.0)):
        for p in PHASES + ("encoder", "forward"):
            rows.append({"variant": variant, "num_requests": n, "images": images, "phase": f"off_host:{p}",
                         "median_us": 10.0 * scale})
            # the steps as measured (with the CPU's forward): ten times dearer, not to be picked
            rows.append({"variant": variant, "num_requests": n, "images": images, "phase": p,
                         "median_us": 100.0 * scale})
    return rows


def test_interpolate_between_and_beyond_points():
    pts = [(1, 100.0), (8, 800.0), (32, 1000.0)]
    assert interpolate(pts, 4) == pytest.approx(100.0 + 700.0 * 3 / 7)
    assert interpolate(pts, 20) == pytest.approx(900.0)
    assert interpolate(pts, 0) == 100.0 and interpolate(pts, 500) == 1000.0
    assert interpolate(pts, 8) == 800.0


def test_census_off_host_rows_interpolated_and_scaled():
    host = census_host_from_rows(_rows(), "baseline", cpu_speed=2.0)
    # schedule: 10 us at 1, 80 us at 8 -> at 4: 10 + 70 * 3/7 = 40 us; x2 = 80 us
    assert host.phase_ns("schedule", 4) == pytest.approx(80_000.0)
    # between 32 (200 us) and 128 (500 us): at 80, 350 us, x2
    assert host.phase_ns("sample", 80) == pytest.approx(700_000.0)
    # the encoder is folded into other: 2 x 10 us at 1 request, x2
    assert host.phase_ns("other", 1) == pytest.approx(40_000.0)
    assert host.requests_points == [1, 8, 32, 128]


def test_census_as_measured_when_asked():
    host = census_host_from_rows(_rows(), "baseline", forward="cpu")
    assert host.phase_ns("schedule", 1) == pytest.approx(100_000.0)


def test_census_missing_variant_is_a_usage_error():
    with pytest.raises(UsageError):
        census_host_from_rows(_rows(), "merged")
    with pytest.raises(UsageError):
        census_host_from_rows(_rows(images=8), "baseline")


def test_cpu_speed_geometric_mean_of_the_ratios():
    gpu_host = [{"variant": "tensor_index_int", "median_ns": 2000.0}, {"variant": "loop_only", "median_ns": 4.0}]
    here = [{"variant": "tensor_index_int", "median_ns": 1000.0}, {"variant": "loop_only", "median_ns": 8.0}]
    s = cpu_speed_from_rows(gpu_host, here)
    assert s.ratios == {"tensor_index_int": 2.0, "loop_only": 0.5}
    assert s.factor == pytest.approx(1.0)
    s3 = cpu_speed_from_rows([{"variant": "tensor_index_int", "median_ns": 300.0},
                              {"variant": "loop_only", "median_ns": 12.0}], here[:1] + [{"variant": "loop_only",
                                                                                          "median_ns": 2.0}])
    assert s3.factor == pytest.approx(math.sqrt(0.3 * 6.0))
    with pytest.raises(UsageError):
        cpu_speed_from_rows(gpu_host[:1], here)


def test_host_model_measured_scheduler_and_census_rest():
    census = census_host_from_rows(_rows(), "baseline", cpu_speed=2.0)
    host = ServeHost(census, cpu_speed=3.0)
    rec = StepRecord(0, StepShape((10,) * 8, (), 0), {"schedule": 1000.0, "update_from_output": 500.0})
    core = host.core_ns(rec)
    assert core["schedule"] == 3000.0 and core["update_from_output"] == 1500.0
    assert core["prepare_inputs"] == pytest.approx(80.0 * 1e3 * 2.0)  # census at 8 requests, x2
    assert set(core) == {"other", "schedule", "prepare_inputs", "sample", "update_from_output"}
    assert host.frontend_ns(8) == pytest.approx(160_000.0)
    from_census = ServeHost(census, cpu_speed=3.0, scheduler="census").core_ns(rec)
    assert from_census["schedule"] == pytest.approx(160_000.0)
    with pytest.raises(UsageError):
        ServeHost(census, 1.0, scheduler="guess")
