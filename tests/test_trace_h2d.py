"""Host-to-device copies: naming, host stall with the following synchronize, call sites, the small-copy rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.trace import Trace
from labkit.trace.analysis.device.bubbles import device_ops
from labkit.trace.analysis.host.steps import detect_steps
from labkit.trace.analysis.device.h2d import classify_copy, copy_report

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize("name, expected", [
    ("Memcpy HtoD (Pageable -> Device)", ("HtoD", "pageable")),
    ("Memcpy HtoD (Pinned -> Device)", ("HtoD", "pinned")),
    ("Memcpy DtoH (Device -> Pageable)", ("DtoH", "pageable")),
    ("Memcpy DtoH (Device -> Pinned)", ("DtoH", "pinned")),
    ("Memcpy DtoD (Device -> Device)", ("DtoD", "device")),
    ("Memcpy HtoD", ("HtoD", "unknown")),
    ("something else", ("unknown", "unknown")),
])
def test_classify_copy(name, expected):
    assert classify_copy(name) == expected


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _copy_trace(tmp_path, n_small: int, step_len: float = 1000.0):
    """``n_small`` pageable 256-byte copies per step in two steps, each followed by a synchronize 5 us later,
    plus one large pinned copy; all under ``helper.py(3): build_ranges`` > ``aten::copy_``."""
    ev, corr = [], 0
    for step in range(2):
        t0 = step * step_len
        ev.append(_x("user_annotation", f"ProfilerStep#{step}", t0, step_len - 1))
        for i in range(n_small):
            t = t0 + 10 + 40 * i
            corr += 1
            ev += [_x("python_function", "helper.py(3): build_ranges", t - 1, 30),
                   _x("cpu_op", "aten::copy_", t, 25),
                   _x("cuda_runtime", "cudaMemcpyAsync", t + 1, 8, correlation=corr),
                   _x("cuda_runtime", "cudaStreamSynchronize", t + 14, 6, correlation=10_000 + corr),
                   _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", t + 5, 1, pid=0, tid=7, stream=7, device=0,
                      correlation=corr, bytes=256)]
    corr += 1
    ev += [_x("cpu_op", "aten::copy_", 1500, 20),
           _x("cuda_runtime", "cudaMemcpyAsync", 1501, 4, correlation=corr),
           _x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 1503, 50, pid=0, tid=7, stream=7, device=0,
              correlation=corr, bytes=1 << 20)]
    p = tmp_path / "copies.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_host_stall_and_call_site(tmp_path):
    an = Trace(_copy_trace(tmp_path, n_small=3))
    h = an.h2d()
    pg = h[h["kind"] == "pageable"]
    assert len(pg) == 6 and (pg["bytes"] == 256).all()
    assert (pg["host_call_us"] == 8).all() and (pg["sync_us"] == 6).all()
    assert (pg["host_stall_us"] == 14).all() and (pg["sync_name"] == "cudaStreamSynchronize").all()
    assert (pg["python_frame"] == "helper.py(3): build_ranges").all() and (pg["cpu_op"] == "aten::copy_").all()
    assert pg["step"].tolist() == [0, 0, 0, 1, 1, 1]
    pinned = h[h["kind"] == "pinned"].iloc[0]
    assert pinned["sync_us"] == 0 and pinned["host_stall_us"] == 4 and pinned["step"] == 1
    by_step = an.copies().by_step.set_index("step")
    assert by_step.loc[0, "pageable_count"] == 3 and by_step.loc[1, "pinned_count"] == 1


@pytest.mark.parametrize("n_small, min_count, flagged", [(3, 4, False), (4, 4, True), (3, 3, True), (8, 4, True)])
def test_small_pageable_rule(tmp_path, n_small, min_count, flagged):
    an = Trace(_copy_trace(tmp_path, n_small=n_small), min_count=min_count)
    assert bool(an.copies().flags) is flagged
    if flagged:
        f = an.copies().flags[0]
        assert f["count"] == 2 * n_small and f["steps_flagged"] == 2 and f["max_per_step"] == n_small
    # the large pinned copy never counts
    assert all("pinned" not in f["rule"] for f in an.copies().flags)


def test_small_bytes_threshold(tmp_path):
    assert not Trace(_copy_trace(tmp_path, n_small=5), small_bytes=255).copies().flags
    assert Trace(_copy_trace(tmp_path, n_small=5), small_bytes=256).copies().flags


def test_real_trace_pageable_copies_are_followed_by_sync():
    # provenance README: 16 pageable HtoD copies, each followed by cudaStreamSynchronize
    an = Trace(DATA / "hta-critical-path-alexnet-a100.pt.trace.json.gz")
    h = an.h2d()
    assert len(h) == 16 and (h["kind"] == "pageable").all()
    assert (h["sync_name"] == "cudaStreamSynchronize").all()
    assert (h["launch_name"] == "cudaMemcpyAsync").all() and (h["cpu_op"] == "aten::copy_").all()
    assert (h["host_stall_us"] > h["host_call_us"]).all()
    an2 = Trace(DATA / "hta-step-based-gpu-annotation-gp100.pt.trace.json.gz")
    assert len(an2.h2d()) == 10 and (an2.h2d()["sync_name"] == "cudaStreamSynchronize").all()


def test_copy_report_rejects_bad_rule(tmp_path):
    from labkit.trace.read.load import load_trace

    tr = load_trace(_copy_trace(tmp_path, 1))
    with pytest.raises(ValueError):
        copy_report(tr, device_ops(tr), detect_steps(tr)[0], min_count=0)
