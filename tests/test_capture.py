"""Trace capture: simulated Kineto files and torch.profiler runs, read back by HTA, torch-tb-profiler
and the lab's analyzer, with idle totals checked against hand-worked schedules."""

import gzip
import json
import logging

import pytest

from labkit.engine.device.devices import SimDevice
from labkit.engine.device.profiles import CopyCost, DeviceProfile, OpCost
from labkit.errors import UsageError
from labkit.engine.device.sim_trace import device_capture
from labkit.trace.capture import TB_TRACE_PATTERN, read_trace, trace_path, write_trace


class FakeClock:
    def __init__(self):
        self.t = 0

    def __call__(self):
        return self.t


def _profile():
    return DeviceProfile(name="hand", origin="test", parametric=True, ops={"A": OpCost(5000)},
                         launch_overhead_ns=1000, sync_overhead_ns=0, event_overhead_ns=0,
                         h2d_pageable=CopyCost(500, 1.0))


def _hand_run(root, steps=3):
    """Per step: 0.3 us schedule, A(5 us) + B(2 us) + C(1 us), a pageable copy, 2 us host work, D(1 us).

    Per step the stream idles 3 us after the copy (host work after the drain) and, between steps,
    ~1.3 us while the next step's schedule + first launch run. All in whole-ish microseconds.
    """
    clk = FakeClock()
    dev = SimDevice(_profile(), clock=clk)
    with device_capture(dev, trace_path(root, "hand"), metadata={"variant": "hand"}, warmup=0, active=steps) as cap:
        for _ in range(steps):
            with dev.annotate("schedule"):
                clk.t += 1000
            dev.launch("A")
            dev.launch("B", 2000)
            dev.launch("C", 1000)
            dev.copy_h2d("h2d:x", nbytes=500)  # 1 us copy
            clk.t += 2000
            dev.launch("D", 1000)
            dev.synchronize()
            cap.step()
    return dev, sorted((root / "hand").iterdir())


def _hand_gaps_us(dev):
    gaps = [b[0] - a[1] for a, b in zip(dev.intervals, dev.intervals[1:])]
    return sum(gaps) / 1e3


def test_sim_capture_writes_tensorboard_named_kineto(tmp_path):
    dev, paths = _hand_run(tmp_path)
    assert len(paths) == 1 and paths[0].parent == tmp_path / "hand"
    assert TB_TRACE_PATTERN.match(paths[0].name) and paths[0].name.endswith(".pt.trace.json.gz")
    tr = read_trace(paths[0])
    assert tr["labkit"]["source"] == "simulated" and tr["labkit"]["variant"] == "hand"
    assert tr["deviceProperties"][0]["name"].startswith("simulated (profile: hand")
    ev = tr["traceEvents"]
    assert [e["name"] for e in ev if e["name"].startswith("ProfilerStep#")] == [f"ProfilerStep#{i}" for i in range(3)]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy"]
    assert len(kernels) == 12 and len(copies) == 3
    assert all(c["name"] == "Memcpy HtoD (Pageable -> Device)" and c["args"]["bytes"] == 500 for c in copies)
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    for k in kernels + copies:
        assert k["args"]["correlation"] in runtime and k["args"]["stream"] == 7 and k["args"]["device"] == 0
    flows = [e for e in ev if e.get("cat") == "ac2g"]
    assert len(flows) == 2 * 15
    names = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] in ("process_name", "thread_name")}
    assert all("simulated" in n for n in names)
    # the copy waits for the drain: its runtime call spans from the call to the copy's end
    first_copy = copies[0]
    call = runtime[first_copy["args"]["correlation"]]
    assert call["name"] == "cudaMemcpyAsync"
    assert call["ts"] + call["dur"] == first_copy["ts"] + first_copy["dur"]


def test_hand_schedule_idle_agrees_with_hta_and_the_lab(tmp_path):
    dev, paths = _hand_run(tmp_path)
    # by hand: step 0 kernels A [1,6] B [6,8] C [8,9] copy [9,10], D [13,14] (us from the start);
    # step 1 starts at host 14 (sync), schedule to 15, A launched [15,16] -> runs [16,21] ...
    # gaps: 3 us after each copy + 2 us between steps (schedule 1 us + launch 1 us), twice
    expected_us = 3 * 3 + 2 * 2
    assert _hand_gaps_us(dev) == expected_us
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    ta = TraceAnalysis(trace_dir=str(paths[0].parent), include_last_profiler_step=True)
    df, _ = ta.get_idle_time_breakdown(visualize=False)
    assert df["idle_time"].sum() == pytest.approx(expected_us)
    from labkit.trace import Trace

    a = Trace(paths[0], include_last_profiler_step=True)
    assert a.summary()["idle_us"] == pytest.approx(expected_us)
    assert a.summary()["busy_us"] == pytest.approx(dev.busy_ns / 1e3)
    assert a.h2d()["kind"].tolist() == ["pageable"] * 3


def test_tensorboard_plugin_parser_reads_sim_trace(tmp_path):
    tb = pytest.importorskip("torch_tb_profiler")
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    dev, paths = _hand_run(tmp_path)
    data = RunProfileData.parse("labkit", "1", str(paths[0]), str(tmp_path / "cache"))
    data = data[0] if isinstance(data, tuple) else data
    assert data.has_kernel and data.has_memcpy_or_memset
    prof = RunGenerator("labkit", "1", data).generate_run_profile()
    assert prof.gpu_metrics  # GPU utilisation series built from our kernels
    del tb


def test_write_trace_is_atomic_and_checks_run_names(tmp_path):
    p = write_trace({"traceEvents": []}, trace_path(tmp_path, "run-1", worker="w"))
    assert TB_TRACE_PATTERN.match(p.name) and p.name.startswith("w.")
    assert json.loads(gzip.open(p).read()) == {"traceEvents": []}
    assert [q.name for q in (tmp_path / "run-1").iterdir()] == [p.name]
    with pytest.raises(UsageError):
        trace_path(tmp_path, "../escape")


def test_torch_profiler_capture_of_the_cpu_engine(tmp_path):
    from labkit.engine.config import EngineConfig
    from labkit.engine.device.devices import TorchDevice
    from labkit.engine.loop import Engine

    cfg = EngineConfig(model="tiny", workload="small", placeholder="fast", scheduling="cursor",
                       prefix_ranges="per_step")
    dev = TorchDevice("cpu")
    eng = Engine(cfg, dev)
    path = trace_path(tmp_path, "cpu-run")
    with device_capture(dev, path, metadata={"variant": cfg.variant_name()}, warmup=2, active=2) as cap:
        eng.run(5, capture=cap)
    assert list((tmp_path / "cpu-run").iterdir()) == [path] and TB_TRACE_PATTERN.match(path.name)
    tr = read_trace(path)
    names = {e["name"] for e in tr["traceEvents"] if e.get("cat") == "user_annotation"}
    assert {"ProfilerStep#2", "ProfilerStep#3", "schedule", "prepare_metadata", "forward", "sample",
            "forward/layer_0", "forward/layer_1"} <= names
    assert tr["labkit"]["variant"] == cfg.variant_name()
