"""The analyzer on the lab's own traces: real H200 engine traces (trimmed fixtures) and a simulated one.

Facts checked come from how the traces were recorded, not from the analyzer: the
``per_layer`` prefix-range variant copies one small pageable tensor per sequence from inside
every layer's forward (``forward/layer_N``), and the ``tensor-loop`` placeholder variant spends
its host time in the scheduler (the ``schedule`` annotation) while the GPU waits.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from labkit.trace import Trace

DATA = Path(__file__).resolve().parent / "data"
PER_LAYER = DATA / "labkit-h200-fast-cursor-per_layer-async.trimmed.pt.trace.json.gz"
TENSOR_LOOP = DATA / "labkit-h200-tensor-loop-none-async.trimmed.pt.trace.json.gz"


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def test_per_layer_small_pageable_copies_flagged_inside_layer_forward():
    doc = _raw(PER_LAYER)
    # count pageable HtoD memcpys directly from the JSON
    pageable = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy"
                and "HtoD" in e.get("name", "") and "Pageable" in e.get("name", "")]
    an = Trace(PER_LAYER)
    assert an.source()["simulated"] is False and "H200" in (an.source().get("gpu") or "")
    h2d = an.h2d()
    assert int((h2d["kind"] == "pageable").sum()) == len(pageable) > 100
    assert an.copies().flags, "per_layer's repeated small pageable copies must be flagged"
    for f in an.copies().flags:
        assert f["call_site"].startswith("forward/layer_"), f["call_site"]
        assert f["count"] >= 10
    flagged = sum(f["count"] for f in an.copies().flags)
    assert flagged >= 0.9 * len(pageable)


def test_tensor_loop_host_starvation_names_schedule():
    an = Trace(TENSOR_LOOP)
    top = an.call_sites().iloc[0]
    assert top["call_site"].split(" > ")[0] == "schedule"
    sched = an.call_sites()[an.call_sites()["call_site"].str.split(" > ").str[0] == "schedule"]
    assert sched["share"].sum() > 0.3
    assert not an.copies().flags  # this variant has no pageable copies


def test_simulated_engine_trace_takes_the_same_path(tmp_path):
    from labkit.engine.config import EngineConfig
    from labkit.engine.device.devices import SimDevice
    from labkit.engine.loop import Engine
    from labkit.engine.device.sim_trace import device_capture
    from labkit.trace.capture import trace_path

    config = EngineConfig(model="tiny", workload="pr40143", placeholder="fast", scheduling="cursor",
                          prefix_ranges="per_layer")
    dev = SimDevice()
    eng = Engine(config, dev)
    path = trace_path(tmp_path, "sim-per_layer")
    with device_capture(dev, path, warmup=0, active=2) as cap:
        eng.run(2, capture=cap)
    doc = _raw(path) if str(path).endswith(".gz") else json.loads(Path(path).read_text())
    device = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels = [e for e in device if e["cat"] == "kernel"]
    pageable = [e for e in device if e["name"] == "Memcpy HtoD (Pageable -> Device)"]
    an = Trace(path, include_last_profiler_step=True)
    assert an.source()["simulated"] is True
    assert an.source()["kind"] == "simulated"
    # every device event of the JSON is an op of the analysis, kernels and copies alike
    assert len(kernels) > 0 and len(pageable) > 0
    assert int(an.idle()["ops_count"].sum()) == len(device)
    assert int((an.ops()["cat"] == "kernel").sum()) == len(kernels)
    assert int((an.h2d()["kind"] == "pageable").sum()) == len(pageable)
    # busy time is the union of the device events, counted here from the JSON (one simulated stream)
    iv = sorted((e["ts"], e["ts"] + e["dur"]) for e in device)
    busy, end = 0.0, -float("inf")
    for a, z in iv:
        busy += max(0.0, z - max(a, end))
        end = max(end, z)
    assert an.idle()["busy_us"].sum() == pytest.approx(busy)
    assert an.idle()["span_us"].sum() == pytest.approx(max(z for _, z in iv) - iv[0][0])
    js = an.to_json()
    assert js["source"]["simulated"] is True
