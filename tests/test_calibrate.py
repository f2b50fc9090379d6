"""``labkit calibrate``: rows, ratios, the saved result, and the GPU part where there is a GPU."""

from __future__ import annotations

import json

import pytest

from labkit import calibrate
from labkit.cli import main as cli_main
from labkit.device import has_cuda
from labkit.results import load_results


def test_cpu_loops_cover_every_variant():
    loops = calibrate.cpu_loops(8)
    assert set(loops) == set(calibrate.CPU_VARIANTS)
    for fn in loops.values():
        assert fn() is None


def test_cpu_rows_shape():
    rows = calibrate.calibrate_cpu(n=16, repeats=3, warmup=0)
    assert [r["variant"] for r in rows] == list(calibrate.CPU_VARIANTS)
    for r in rows:
        assert r["kind"] == "cpu" and r["metric"] == "host_ns" and r["elements"] == 16
        assert 0 < r["p20_ns"] <= r["median_ns"] <= r["p80_ns"]


def test_summary_ratios_by_hand():
    rows = [
        {"kind": "cpu", "variant": "list_index", "metric": "host_ns", "median_ns": 20.0},
        {"kind": "cpu", "variant": "tensor_index_int", "metric": "host_ns", "median_ns": 1000.0},
        {"kind": "gpu", "variant": "h2d_pageable", "metric": "host_ns", "size_bytes": 256, "median_ns": 12000.0},
        {"kind": "gpu", "variant": "h2d_pinned", "metric": "host_ns", "size_bytes": 256, "median_ns": 4000.0},
        {"kind": "gpu", "variant": "h2d_pinned", "metric": "device_ns", "size_bytes": 4096, "median_ns": 1.0},
    ]
    assert calibrate.summary(rows) == {"tensor_over_list": 50.0, "pageable_over_pinned_host_256B": 3.0}


def test_gpu_part_refuses_without_gpu(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    from labkit.errors import UsageError

    with pytest.raises(UsageError, match="CUDA GPU"):
        calibrate.calibrate_gpu()


def test_cli_saves_cpu_result(results_store, tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert cli_main(["calibrate", "--device", "cpu", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "tensor_index_int" in printed and "tensor_over_list" in printed
    (res,) = load_results(name="calibration")
    assert res.source == "measured-cpu"
    assert {r["kind"] for r in res.rows} == {"cpu"}
    assert json.loads(out.read_text())["name"] == "calibration"


def test_cli_bad_input(tmp_path, capsys):
    assert cli_main(["calibrate", "--json", str(tmp_path)]) == 2
    assert cli_main(["calibrate", "--bogus"]) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")
def test_gpu_rows(results_store):
    rows, source = calibrate.run_calibration("cuda")
    assert source == "measured-gpu"
    gpu = [r for r in rows if r["kind"] == "gpu"]
    sizes = {r["size_bytes"] for r in gpu if r["variant"].startswith("h2d")}
    assert sizes == set(calibrate.COPY_SIZES_BYTES)
    assert {"launch_torch_add1"} <= {r["variant"] for r in gpu}
    assert all(r["median_ns"] > 0 for r in gpu)
