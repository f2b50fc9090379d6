"""``labkit bench vllm-sched`` without vLLM: the summary of recorded rows and the command line.

The census itself (vLLM's real scheduler) and the patch are checked in
tests/vllm_conformance/test_vllm_sched.py.
"""

from __future__ import annotations

import pytest

from labkit.cli import main as cli_main
from labkit.results import VLLM_SCHED, find_all, make_result, results_rows, save_result
from labkit.vllm.census import bench_vllm_sched


def _rows(n, m, text, installed, early):
    out = []
    for variant, ms in (("text", text), ("installed", installed), ("early_return", early)):
        out.append({"variant": variant, "num_requests": n, "images": m, "phase": "schedule",
                    "median_ns": ms * 1e6, "p20_ns": ms * 1e6, "p80_ns": ms * 1e6})
        out.append({"variant": variant, "num_requests": n, "images": m, "phase": "update",
                    "median_ns": 0.5e6, "p20_ns": 0.5e6, "p80_ns": 0.5e6})
    return out


def test_summary_hand_worked(tmp_path):
    rows = _rows(128, 32, 1.0, 2.0, 1.25) + _rows(8, 1, 0.1, 0.1, 0.1)
    save_result(make_result("vllm_sched", rows, params={"vllm_version": "0.33.0"}, source="measured-cpu",
                            machine={"slug": "cpu-test-2c", "cpu_model": "test"}), root=tmp_path)
    got = bench_vllm_sched.summary(results_rows(find_all(VLLM_SCHED, root=tmp_path)), device_step_ms=10.0)
    small, big = got
    assert (big["num_requests"], big["images"], big["machine"]) == (128, 32, "cpu-test-2c")
    assert big["mm_overhead_ms"] == pytest.approx(1.0) and big["mm_overhead_patched_ms"] == pytest.approx(0.25)
    assert big["overhead_cut"] == pytest.approx(0.75)
    # device-bound step (10 ms): overlapped, the host saving is hidden; serial, it is kept
    assert big["step_ms_installed_overlapped"] == big["step_ms_patched_overlapped"] == 10.0
    assert big["step_ms_installed_serial"] == pytest.approx(12.0)
    assert big["step_ms_patched_serial"] == pytest.approx(11.25)
    assert small["overhead_cut"] is None  # no multimodal overhead to cut
    assert bench_vllm_sched.summary([]) == []


def test_cli_without_vllm_or_with_bad_arguments(capsys):
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    assert cli_main(["bench", "vllm-sched", "--no-save"]) == 2
    assert "vLLM is not installed" in capsys.readouterr().err
    for bad in (["--requests", "0"], ["--images", "65"], ["--steps", "0"], ["--size", "huge"]):
        assert cli_main(["bench", "vllm-sched", *bad]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("labkit bench vllm-sched: error:")
