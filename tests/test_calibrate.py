"""``labkit calibrate``: rows, ratios, the saved result, and the GPU part where there is a GPU."""

from __future__ import annotations

import json

import pytest

from labkit import calibrate
from labkit.cli import main as cli_main
from labkit.device import has_cuda
from labkit.results import load_results
from labkit import timing


def test_cpu_loops_read_what_their_names_say(monkeypatch):
    """Each loop reads its n elements from the container it names (tensor reads counted)."""
    import torch

    counts = {"getitem": 0, "int": 0, "item": 0}
    get, to_int, item = torch.Tensor.__getitem__, torch.Tensor.__int__, torch.Tensor.item

    def counting(name, fn):
        def wrapped(*a, **k):
            counts[name] += 1
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(torch.Tensor, "__getitem__", counting("getitem", get))
    monkeypatch.setattr(torch.Tensor, "__int__", counting("int", to_int))
    monkeypatch.setattr(torch.Tensor, "item", counting("item", item))
    loops = timing.cpu_loops(8)
    assert list(loops) == list(timing.CPU_VARIANTS)
    seen = {}
    for name, fn in loops.items():
        before = dict(counts)
        fn()
        seen[name] = tuple(counts[k] - before[k] for k in ("getitem", "int", "item"))
    assert seen == {"loop_only": (0, 0, 0), "list_index": (0, 0, 0), "tensor_index_int": (8, 8, 0),
                    "tensor_index_item": (8, 0, 8)}


def test_cpu_rows_are_per_element_times(monkeypatch):
    """The rows divide each loop's quantiles by the elements it reads (a loop timed by hand here)."""
    from labkit.timing import Timing

    loop = Timing(median_ns=16_000.0, p20_ns=12_800.0, p80_ns=19_200.0, mean_ns=16_000.0, min_ns=11_200.0,
                  repeats=3, number=1, method="perf_counter")
    monkeypatch.setattr(timing, "time_host", lambda fn, warmup, repeats: loop)
    rows = timing.calibrate_cpu(n=16, repeats=3, warmup=0)
    assert [r["variant"] for r in rows] == list(timing.CPU_VARIANTS)
    for r in rows:
        assert r["kind"] == "cpu" and r["metric"] == "host_ns" and r["elements"] == 16
        assert (r["median_ns"], r["p20_ns"], r["p80_ns"], r["repeats"]) == (1000.0, 800.0, 1200.0, 3)


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
    (res,) = load_results()
    assert res.name == "calibration_quick" and res.size == "quick"  # quick by default, never over a full one
    assert res.source == "measured-cpu"
    assert {r["kind"] for r in res.rows} == {"cpu"}
    assert res.command == f"labkit calibrate --device cpu --json {out}"
    assert json.loads(out.read_text())["name"] == "calibration_quick"


def _fixed_calibration(monkeypatch):
    """``run_calibration`` replaced by one hand-made row; returns the sizes it was called with."""
    calls = []

    def fake(device="auto", size="quick", *, on_rows=None):
        calls.append(size)
        return [{"kind": "cpu", "variant": "list_index", "metric": "host_ns", "median_ns": 10.0, "p20_ns": 9.0,
                 "p80_ns": 11.0, "repeats": 3, "number": 1}], "measured-cpu"

    monkeypatch.setattr(calibrate, "run_calibration", fake)
    return calls


def test_cli_size_full_names_a_full_recording(results_store, monkeypatch, capsys):
    calls = _fixed_calibration(monkeypatch)
    assert cli_main(["calibrate", "--size", "full", "--device", "cpu"]) == 0
    assert capsys.readouterr().err == ""
    assert calls == ["full"]
    (res,) = load_results()
    assert (res.name, res.size, res.params["size"]) == ("calibration", "full", "full")


def test_cli_bad_input(tmp_path, results_store, monkeypatch, capsys):
    calls = _fixed_calibration(monkeypatch)
    assert cli_main(["calibrate", "--json", str(tmp_path)]) == 2
    assert cli_main(["calibrate", "--bogus"]) == 2
    assert cli_main(["calibrate", "--size", "huge"]) == 2
    assert cli_main(["calibrate", "--full"]) == 2  # one way to say the size: --size
    assert calls == [] and not results_store.exists()  # refused before any work or write


def _host_link_bytes_per_ns() -> float | None:
    """The GPU's host link bandwidth per direction in bytes/ns (= GB/s), from nvidia-smi's PCIe fields."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=pcie.link.gen.max,pcie.link.width.max",
                              "--format=csv,noheader,nounits", "-i", "0"], capture_output=True, text=True,
                             timeout=30, check=True).stdout.split(",")
        gen, width = int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    per_lane = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}.get(gen)  # GB/s per lane, one way
    return per_lane * width if per_lane else None


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")
def test_gpu_rows_within_physical_bounds(results_store):
    rows, source = calibrate.run_calibration("cuda")
    assert source == "measured-gpu"
    gpu = [r for r in rows if r["kind"] == "gpu"]
    sizes = {r["size_bytes"] for r in gpu if r["variant"].startswith("h2d")}
    assert sizes == set(calibrate.COPY_SIZES_BYTES)
    by = {(r["variant"], r["metric"], r.get("size_bytes")): r["median_ns"] for r in gpu}
    big = max(calibrate.COPY_SIZES_BYTES)
    # a pageable copy stages through a pinned buffer: at 1 MiB it is slower than the pinned copy itself
    assert by[("h2d_pageable", "host_ns", big)] > by[("h2d_pinned", "host_ns", big)]
    link = _host_link_bytes_per_ns()
    for variant in ("h2d_pageable", "h2d_pinned"):
        for n in calibrate.COPY_SIZES_BYTES:
            assert 1_000 < by[(variant, "host_ns", n)] < 1e7  # a copy call costs us on the host, never ns
            if link:  # no copy moves its bytes faster than the link carries them
                assert n / by[(variant, "host_ns", n)] < link, (variant, n, link)
    for variant in ("launch_torch_add1", "launch_triton_empty"):
        if (variant, "host_ns", None) in by:
            assert 1_000 < by[(variant, "host_ns", None)] < 1e6  # a launch from Python: above 1 us
    # a one-element add runs in a few us on the device, far below a millisecond
    assert 0 < by[("launch_torch_add1", "device_ns", None)] < 1e5


def test_device_times_come_from_the_trace_activities():
    # hand-made Kineto events: two copies (3 us, 5 us), one kernel, one host op
    trace = {"traceEvents": [
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "dur": 3.0},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "dur": 5.0},
        {"ph": "X", "cat": "kernel", "name": "add", "dur": 1.5},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "dur": 40.0},
        {"ph": "i", "cat": "gpu_memcpy", "name": "marker"},
    ]}
    assert calibrate.device_durations_ns(trace, ("gpu_memcpy",)) == [3000.0, 5000.0]
    assert calibrate.device_durations_ns(trace, ("kernel",)) == [1500.0]
    t = calibrate.timing_of([5000.0, 1000.0, 3000.0, 2000.0, 4000.0])
    assert (t.median_ns, t.p20_ns, t.p80_ns, t.min_ns, t.repeats, t.method) == (3000.0, 2000.0, 4000.0, 1000.0, 5,
                                                                                  "profiler")
    assert calibrate.timing_of([]) is None


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")
def test_gpu_rows_label_event_spans_apart_from_device_time():
    rows = calibrate.calibrate_gpu(sizes_bytes=(4096,), repeats=5, launches=10)
    metrics = {(r["variant"], r["metric"]) for r in rows}
    for variant in ("h2d_pageable", "h2d_pinned", "launch_torch_add1"):
        assert {(variant, "host_ns"), (variant, "event_span_ns"), (variant, "device_ns")} <= metrics
    by = {(r["variant"], r["metric"]): r["median_ns"] for r in rows}
    # a 4 KiB copy's own device time is far below the host-inclusive span around a pageable copy
    assert by[("h2d_pageable", "device_ns")] <= by[("h2d_pageable", "event_span_ns")]
