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


def _server_rows():
    # per step at 32 and 128 streams (ns): output thread 0.2 / 0.6 ms, input thread 0 / 0.04 ms,
    # API server 8 / 32 ms of which the output processor 2 / 8 ms
    rows = []
    for n, out_t, in_t, api, proc in ((32, 200e3, 0.0, 8e6, 2e6), (128, 600e3, 40e3, 32e6, 8e6)):
        for phase, v in (("engine_output_thread", out_t), ("engine_input_thread", in_t),
                         ("api_server_outputs", api), ("api_output_processor", proc)):
            rows.append({"kind": "per_step", "requests": n, "phase": phase, "median_ns": v})
    rows.append({"kind": "per_step", "requests": 128, "phase": "client", "median_ns": None, "mean_ns": 1e6})
    return rows


def test_server_host_linear_between_points_proportional_outside():
    from labkit.serve.host.server_host import server_host_from_rows

    s = server_host_from_rows(_server_rows(), cpu_speed=2.0)
    # between the points: at 80 streams the output thread is 0.2 + 0.4 * 48/96 = 0.4 ms, x2
    assert s.phase_ns("engine_output_thread", 80) == pytest.approx(800e3)
    # below the first point proportional to the streams: 8 of 32 -> a quarter of 0.2 ms, x2
    assert s.phase_ns("engine_output_thread", 8) == pytest.approx(100e3)
    assert s.io_threads_ns(128) == pytest.approx(2 * 640e3)
    # a stream's chunk: (32 - 8) ms / 128 at 128 streams, x2; (8 - 2) / 32 at 32
    assert s.stream_ns_per_request(128) == pytest.approx(2 * 24e6 / 128)
    assert s.stream_ns_per_request(32) == pytest.approx(2 * 6e6 / 32)
    assert s.output_processor_ns(128) == pytest.approx(16e6)


def test_server_host_needs_every_phase():
    from labkit.serve.host.server_host import server_host_from_rows

    rows = [r for r in _server_rows() if r["phase"] != "engine_input_thread"]
    with pytest.raises(UsageError, match="engine_input_thread"):
        server_host_from_rows(rows)


def test_serve_host_with_the_server_adds_io_threads_and_the_measured_output_processor():
    from labkit.serve.host.server_host import server_host_from_rows

    census = census_host_from_rows(_rows(), "baseline")
    rec = StepRecord(0, StepShape(decode_context_lens=(100,) * 128), {"schedule": 1e6, "update_from_output": 2e5})
    plain = ServeHost(census, 1.0)
    with_server = ServeHost(census, 1.0, server=server_host_from_rows(_server_rows()))
    assert "io_threads" not in plain.core_ns(rec)
    assert with_server.core_ns(rec)["io_threads"] == pytest.approx(640e3)
    assert {k: v for k, v in with_server.core_ns(rec).items() if k != "io_threads"} == plain.core_ns(rec)
    assert with_server.frontend_ns(128) == pytest.approx(8e6) and plain.frontend_ns(128) == pytest.approx(500e3)
    assert plain.stream_ns_per_request(128) == 0.0
    assert with_server.stream_ns_per_request(128) == pytest.approx(24e6 / 128)


def test_a_fitted_host_per_request_joins_the_core_chain():
    census = census_host_from_rows(_rows(), "baseline")
    rec = StepRecord(0, StepShape(decode_context_lens=(100,) * 120, prefill_chunks=((50, 0, True),) * 8), {})
    host = ServeHost(census, 1.0, extra_ns_per_request=1000.0)
    assert host.core_ns(rec)["fitted_host"] == pytest.approx(128_000.0)  # 120 decoding + 8 prefilling
    assert "fitted_host" not in ServeHost(census, 1.0).core_ns(rec)


def _cal(tensor_ns: float, loop_ns: float) -> list:
    return [{"variant": "tensor_index_int", "median_ns": tensor_ns}, {"variant": "loop_only", "median_ns": loop_ns}]


def test_a_results_own_unit_costs_come_before_the_machines_calibration():
    from labkit.serve.host.cpu_speed import IN_RUN_KEY, calibration_of

    machine = {"name": "calibration", "rows": _cal(1000.0, 5.0)}
    # per point: 1200 / 1400 / 1600 ns and 6 / 8 / 7 ns -> medians 1400 and 7
    doc = {"name": "vllm_step", "params": {IN_RUN_KEY: {"1x32": _cal(1200.0, 6.0), "8x32": _cal(1400.0, 8.0),
                                                         "128x32": _cal(1600.0, 7.0)}}}
    rows, where = calibration_of(doc, machine)
    assert {r["variant"]: r["median_ns"] for r in rows} == {"tensor_index_int": 1400.0, "loop_only": 7.0}
    assert where == "in its own run (median over 3 points)"
    # one list: used as it is
    rows, where = calibration_of({"params": {IN_RUN_KEY: _cal(900.0, 4.0)}}, machine)
    assert {r["variant"]: r["median_ns"] for r in rows} == {"tensor_index_int": 900.0, "loop_only": 4.0}
    assert where == "in its own run"
    # none kept, or a unit cost missing: the machine's
    for params in ({}, {IN_RUN_KEY: {"1x32": _cal(1200.0, 6.0)[:1]}}):
        rows, where = calibration_of({"params": params}, machine)
        assert rows is machine["rows"] and where.startswith("the machine's calibration")
    with pytest.raises(UsageError, match="no unit costs"):
        calibration_of({"name": "vllm_input", "params": {}}, None)


def test_the_serving_speeds_divide_each_cost_by_its_own_runs_unit_costs():
    from types import SimpleNamespace

    from labkit.serve.host.cpu_speed import IN_RUN_KEY, serve_speeds

    gpu = {"rows": _cal(1400.0, 5.0)}
    machine = {"rows": _cal(1000.0, 5.0)}  # the census machine's calibration.json
    census = {"params": {IN_RUN_KEY: {"128x32": _cal(1750.0, 6.25)}}}  # a slow hour: 1.25x on both
    inputs = SimpleNamespace(calibration_gpu_host=gpu, calibration_census=machine, calibration_here={"rows": _cal(700.0, 2.5)},
                             census=census, input_processing={"params": {}}, server_host=None)
    sp = serve_speeds(inputs, here_rows=_cal(1400.0, 10.0))
    # census: sqrt(1400/1750 * 5/6.25) = 0.8; inputs (the machine's): sqrt(1.4 * 1) = 1.1832; here: sqrt(1 * 0.5)
    assert sp["census"][0].factor == pytest.approx(0.8) and sp["census"][1] == "in its own run"
    assert sp["inputs"][0].factor == pytest.approx(1.4 ** 0.5) and "machine's calibration" in sp["inputs"][1]
    assert sp["here"][0].factor == pytest.approx(0.5 ** 0.5) and sp["server_host"] is None
    # without the unit costs measured now, this machine's recorded calibration: sqrt(2 * 2) = 2
    assert serve_speeds(inputs)["here"][0].factor == pytest.approx(2.0)


def test_the_intake_is_scaled_by_the_image_paths_unit_cost_where_both_machines_hold_it():
    from types import SimpleNamespace

    from labkit.serve.host.cpu_speed import IN_RUN_KEY, serve_speeds

    image = lambda ns: [{"variant": "image_decode_resize", "median_ns": ns}]  # noqa: E731
    gpu = {"rows": _cal(1400.0, 5.0) + image(30e6)}
    machine = {"rows": _cal(1000.0, 5.0)}
    inputs_doc = {"params": {IN_RUN_KEY: _cal(1000.0, 5.0) + image(20e6)}}
    inputs = SimpleNamespace(calibration_gpu_host=gpu, calibration_census=machine, calibration_here=machine,
                             census={"params": {}}, input_processing=inputs_doc, server_host=None)
    sp = serve_speeds(inputs)
    # the intake: 30 / 20 ms = 1.5 (not the Python unit costs' sqrt(1.4)); the census keeps those
    assert sp["inputs"][0].factor == pytest.approx(1.5) and sp["inputs"][0].ratios == {"image_decode_resize": 1.5}
    assert sp["inputs"][1].endswith("the image path's unit cost")
    assert sp["census"][0].factor == pytest.approx(1.4 ** 0.5)
    # the GPU node's host without it: the Python unit costs, and the reason said
    inputs.calibration_gpu_host = {"rows": _cal(1400.0, 5.0)}
    sp = serve_speeds(inputs)
    assert sp["inputs"][0].factor == pytest.approx(1.4 ** 0.5) and "GPU node's host has no image-path" in sp["inputs"][1]
    # the input's run without it (recorded before the unit existed): the same, and it says which lacks it
    inputs.calibration_gpu_host = gpu
    inputs.input_processing = {"params": {IN_RUN_KEY: _cal(1000.0, 5.0)}}
    assert "this input's run has no image-path" in serve_speeds(inputs)["inputs"][1]


def test_the_image_path_unit_cost_decodes_resizes_and_normalizes_one_image():
    pytest.importorskip("PIL")
    from labkit.calibrate import IMAGE_RESIZED, calibrate_image, image_path

    out = image_path()()
    # (height, width, RGB) of the resized image, values in [-1, 1] as the processor's normalization gives
    assert out.shape == (IMAGE_RESIZED[1], IMAGE_RESIZED[0], 3) and out.dtype.name == "float32"
    assert -1.0 <= float(out.min()) < -0.9 and 0.9 < float(out.max()) <= 1.0
    (row,) = calibrate_image(repeats=2, warmup=1)
    assert row["variant"] == "image_decode_resize" and row["kind"] == "cpu" and row["median_ns"] > 0
