"""Idle bubbles: a hand-worked trace, and HTA (traceinsight) on every real GPU trace of the collection."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hta_reference import CHECKED, COLUMNS, RECORDED, hta_live, hta_version, raw_trace, recorded
from real_traces import fixtures, find, shared, shared_trace

from labkit.trace import Trace
from labkit.trace.analysis.device.bubbles import find_bubbles, host_starvation, hta_idle_breakdown, hta_idle_totals
from labkit.trace.analysis.host.steps import detect_steps
from labkit.trace.read.load import load_trace

DATA = Path(__file__).resolve().parent / "data"
LOCAL = fixtures()
SHARED_FILES = shared()  # the larger traces, extra cases where present
#: the whole analysis takes a second or more on these: marked slow (HTA's figures for the larger
#: traces are recorded, see tests/hta_reference.py)
BIG = {"nvllm", "hta-trace-diff-control", "param-linear", "hta-ns-resolution"}


def X(cat, name, ts, dur, pid=1, tid=1, **args):
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def K(name, ts, dur, corr, stream=7, cat="kernel", **args):
    return X(cat, name, ts, dur, pid=0, tid=stream, stream=stream, correlation=corr, device=0, **args)


#: The hand-worked timeline (us). Stream 7: K1 [20,30], K2 [31,36], K2b [32,34] (overlaps K2),
#: K3 [84,90] launched at 81 while the host sat in slow Python [36,76], then a pageable copy
#: [95,97] launched at 92. Stream 9: K4 [40,45], K5 [200,205] whose launch is not in the trace.
HAND = [
    X("user_annotation", "ProfilerStep#1", 0, 100),
    X("cpu_op", "aten::mm", 10, 10),
    X("cuda_runtime", "cudaLaunchKernel", 12, 3, correlation=1),
    X("cpu_op", "aten::add", 21, 4),
    X("cuda_runtime", "cudaLaunchKernel", 22, 1, correlation=2),
    X("cuda_runtime", "cudaLaunchKernel", 23, 1, correlation=4),
    X("cuda_runtime", "cudaLaunchKernel", 30, 2, correlation=6),
    X("python_function", "model.py(10): slow_python", 36, 40),
    X("cpu_op", "aten::relu", 80, 5),
    X("cuda_runtime", "cudaLaunchKernel", 81, 2, correlation=3),
    X("cpu_op", "aten::copy_", 90, 30),
    X("cuda_runtime", "cudaMemcpyAsync", 92, 10, correlation=5),
    X("cuda_runtime", "cudaStreamSynchronize", 103, 7, correlation=7),
    K("K1", 20, 10, 1),
    K("K2", 31, 5, 2),
    K("K2b", 32, 2, 4),
    K("K3", 84, 6, 3),
    K("Memcpy HtoD (Pageable -> Device)", 95, 2, 5, cat="gpu_memcpy", bytes=1024),
    K("K4", 40, 5, 6, stream=9),
    K("K5", 200, 5, 99, stream=9),
]


@pytest.fixture
def hand_trace(tmp_path):
    p = tmp_path / "hand.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": HAND, "deviceProperties": [{"id": 0, "name": "Hand GPU"}]}))
    return load_trace(p)


def test_hand_worked_bubbles(hand_trace):
    b = find_bubbles(hand_trace, detect_steps(hand_trace)[0])
    got = sorted(zip(b["stream"], b["start_us"], b["dur_us"], b["category"]))
    assert got == [(7, 30.0, 1.0, "kernel_wait"), (7, 36.0, 48.0, "host_wait"), (7, 90.0, 5.0, "host_wait"),
                   (9, 45.0, 155.0, "other")]


def test_hand_worked_streams_and_hta_convention(hand_trace):
    an = Trace(hand_trace)
    s7 = an.idle().set_index("stream").loc[7]
    assert s7["span_us"] == 77.0 and s7["busy_us"] == 23.0 and s7["idle_us"] == 54.0
    assert (s7["idle_host_wait_us"], s7["idle_kernel_wait_us"], s7["idle_other_us"]) == (53.0, 1.0, 0.0)
    # HTA: signed gaps after the previous row's end: 1, 32-36=-4, 84-34=50 (host), 95-90=5 (host)
    hta = hta_idle_breakdown(hand_trace).set_index(["stream", "idle_category"])["idle_time"]
    assert hta[(7, "host_wait")] == 55.0 and hta[(7, "kernel_wait")] == -3.0 and hta[(7, "other")] == 0.0
    assert hta[(9, "other")] == 155.0 and hta_idle_totals(hta.reset_index())[9] == 155.0


def test_hand_worked_host_call_sites(hand_trace):
    b = find_bubbles(hand_trace, detect_steps(hand_trace)[0])
    rank, top = host_starvation(hand_trace, b)
    table = {(r.annotation, r.python_frame, r.cpu_op, r.runtime): r.idle_overlap_us for r in rank.itertuples()}
    assert table == {
        ("ProfilerStep#1", "model.py(10): slow_python", "", ""): 40.0,
        ("ProfilerStep#1", "", "", ""): 4.0,
        ("ProfilerStep#1", "", "aten::relu", ""): 2.0,
        ("ProfilerStep#1", "", "aten::relu", "cudaLaunchKernel"): 2.0,
        ("ProfilerStep#1", "", "aten::copy_", ""): 2.0,
        ("ProfilerStep#1", "", "aten::copy_", "cudaMemcpyAsync"): 3.0,
    }
    assert rank["call_site"].iloc[0] == "ProfilerStep#1 > model.py(10): slow_python"
    assert rank["share"].iloc[0] == pytest.approx(40 / 53)
    # per bubble, the call site with the largest overlap (label: the two innermost layers present)
    assert set(top.values) == {"aten::copy_ > cudaMemcpyAsync", "ProfilerStep#1 > model.py(10): slow_python"}


def test_no_device_events_reports_host_time(tmp_path):
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps({"traceEvents": [X("cpu_op", "a", 0, 10), X("cpu_op", "b", 5, 10), X("cpu_op", "c", 30, 5)]}))
    an = Trace(p)
    assert not an.source()["has_device_events"] and an.source()["kind"] == "host-only"
    assert len(an.idle()) == 0 and len(an.bubbles()) == 0
    assert an.host_threads()["busy_us"].tolist() == [20.0] and an.host_threads()["span_us"].tolist() == [35.0]
    assert any("host time only" in line for line in an.summary_lines())


# ----------------------------------------------------------------------------------------------
# HTA side by side on real traces
# ----------------------------------------------------------------------------------------------

def _raw_events(path):
    return raw_trace(path)


def _has_gpu_work(path) -> bool:
    return any(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in _raw_events(path)["traceEvents"])


def _cases():
    seen = {}
    for p in LOCAL + SHARED_FILES:
        seen.setdefault(p.name, p)
    out = []
    for name, p in sorted(seen.items()):
        marks = [pytest.mark.slow] if any(name.startswith(b) for b in BIG) else []
        out.append(pytest.param(p, marks=marks, id=name.removesuffix(".pt.trace.json.gz")[:60]))
    return out


@pytest.mark.parametrize("path", _cases())
def test_idle_agrees_with_hta(path):
    if not _has_gpu_work(path):
        pytest.skip("no GPU work in this trace")
    ref = recorded(path) if path.name in RECORDED else None  # HTA's own figures, recorded
    if ref is None:
        pytest.importorskip("hta.trace_analysis")
        ref = hta_live(path)
    tr = load_trace(path)
    mine = hta_idle_breakdown(tr)
    ref_tot, my_tot = hta_idle_totals(ref), hta_idle_totals(mine)
    assert set(ref_tot) == set(my_tot)
    for stream, total in ref_tot.items():
        assert my_tot[stream] == pytest.approx(total, rel=0.01, abs=1.0), f"stream {stream}"
    # categories agree as well (HTA omits categories it never saw)
    r = ref.set_index(["stream", "idle_category"])["idle_time"]
    m = mine.set_index(["stream", "idle_category"])["idle_time"]
    for key, val in r.items():
        assert m.get(key, 0.0) == pytest.approx(val, rel=0.01, abs=1.0), f"{key}"
    # the whole analysis runs and its memcpy count matches a direct count of the events
    an = Trace(tr)
    raw = _raw_events(path)["traceEvents"]
    n_memcpy = sum(1 for e in raw if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy")
    assert len(an.copies().copies) == n_memcpy
    n_h2d_pageable = sum(1 for e in raw if e.get("name") == "Memcpy HtoD (Pageable -> Device)")
    assert int((an.h2d()["kind"] == "pageable").sum()) == n_h2d_pageable
    # lab idle: each category is non-negative and they sum to idle_us
    s = an.idle()
    assert (s[["idle_host_wait_us", "idle_kernel_wait_us", "idle_other_us"]] >= 0).all().all()
    assert (s["idle_us"] - s[["idle_host_wait_us", "idle_kernel_wait_us", "idle_other_us"]].sum(axis=1)).abs().max() < 1e-6


@pytest.mark.parametrize("name", [n for n in CHECKED if find(n) is not None])
def test_recorded_hta_figures_are_what_hta_gives(name):
    """The recording that stands in for HTA on the larger traces (tests/hta_reference.py) holds
    what HTA gives: checked against HTA run live on the recording's smaller traces (two fixtures,
    and a shared trace where present)."""
    path = find(name)
    pytest.importorskip("hta.trace_analysis")
    rec = recorded(path)
    if rec is None:
        pytest.skip(f"no recording for this file and traceinsight {hta_version()}: HTA runs live everywhere")
    live = hta_live(path)[COLUMNS].reset_index(drop=True)
    assert len(rec) > 0
    pd.testing.assert_frame_equal(rec, live, check_dtype=False)


#: HTA's own numbers for the whole rank-3 trace (traceinsight 0.6.1, ranks=[3]): stream 7's total idle
#: without and with the last step; on the fixture HTA runs live
WHOLE_RANK3 = {7: (102154 + 14226 + 32183, 133311 + 17152 + 32751)}


@pytest.mark.parametrize("path, typed", [
    pytest.param(DATA / "hta-trace-diff-control-a100-rank3.last-step-start.pt.trace.json.gz", None, id="fixture"),
    *[pytest.param(p, WHOLE_RANK3, id="whole-trace") for p in shared_trace("hta-trace-diff-control-a100-rank3.pt.trace.json.gz")],
])
def test_hta_include_last_step_changes_window(path, typed):
    """HTA leaves out the work launched in the last ProfilerStep unless told otherwise: on 10 ms of
    an A100 rank's trace around its last step's start (a fixture), the lab's HTA-compatible idle
    per stream equals HTA's (run live) in both modes, and the two modes differ; on the whole trace,
    where present, it equals HTA's recorded numbers."""
    tr = load_trace(path)
    got = {last: hta_idle_totals(hta_idle_breakdown(tr, include_last_profiler_step=last)) for last in (False, True)}
    assert got[False] != got[True]
    if typed is not None:
        for stream, (without, with_last) in typed.items():
            assert got[False][stream] == pytest.approx(without) and got[True][stream] == pytest.approx(with_last)
        return
    pytest.importorskip("hta.trace_analysis")
    for last in (False, True):
        ref = hta_idle_totals(hta_live(path, include_last_profiler_step=last))
        assert set(got[last]) == set(ref), (last, ref)
        for stream, total in ref.items():
            assert got[last][stream] == pytest.approx(total, rel=1e-6, abs=0.5), (last, stream)


def test_host_thread_time_per_thread_by_hand(tmp_path):
    """Busy time is the union of a thread's events (nested and overlapping ones counted once);
    device events are not host threads; threads sort by busy time."""
    p = tmp_path / "threads.json"
    p.write_text(json.dumps({"traceEvents": [
        # thread (1, 1): [0, 10] with [2, 4] nested, [8, 15] overlapping, then [20, 25]: busy 15 + 5
        X("cpu_op", "a", 0, 10), X("python_function", "b", 2, 2), X("cpu_op", "c", 8, 7), X("cpu_op", "d", 20, 5),
        # thread (1, 2), listed out of order: [30, 31], [0, 3] -> busy 4, span 31
        X("cpu_op", "e", 30, 1, tid=2), X("cuda_runtime", "f", 0, 3, tid=2),
        # thread (2, 1): one long event
        X("user_annotation", "g", 5, 40, pid=2),
        K("k", 1, 100, corr=1),  # a kernel: device time, not a host thread
    ]}))
    th = Trace(p).host_threads()
    assert th[["pid", "tid"]].values.tolist() == [[2, 1], [1, 1], [1, 2]]
    assert th["busy_us"].tolist() == [40.0, 20.0, 4.0]
    assert th["span_us"].tolist() == [40.0, 25.0, 31.0]
    assert th["events"].tolist() == [1, 4, 2]


def test_a_table_is_computed_once_and_only_when_asked(tmp_path, monkeypatch):
    import labkit.trace.analysis.trace as facade

    calls: dict = {}

    def counting(name):
        real = getattr(facade, name)

        def wrapper(*a, **k):
            calls[name] = calls.get(name, 0) + 1
            return real(*a, **k)
        monkeypatch.setattr(facade, name, wrapper)

    for name in ("find_bubbles", "copy_report", "hta_idle_breakdown", "host_thread_time", "graph_replays",
                 "engine_phase_table"):
        counting(name)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [X("cpu_op", "a", 0, 10), K("k", 20, 5, corr=1), K("k", 40, 5, corr=2)]}))
    t = Trace(p)
    assert calls == {}  # reading the file computes no table
    b = t.bubbles()
    assert t.bubbles() is b and t.call_sites() is t.call_sites()
    assert b["dur_us"].tolist() == [15.0]  # the one gap, 25 -> 40
    assert calls == {"find_bubbles": 1}  # neither the copies, HTA's breakdown, threads nor graphs
    assert t.idle() is t.idle() and calls == {"find_bubbles": 1}
    assert t.host_threads() is t.host_threads() and calls["host_thread_time"] == 1
    t.to_json()
    t.to_json()
    assert calls == dict.fromkeys(["find_bubbles", "copy_report", "hta_idle_breakdown", "host_thread_time",
                                   "graph_replays", "engine_phase_table"], 1)
    assert Trace(p).bubbles() is not b  # kept on the instance, nothing global
    assert calls["find_bubbles"] == 2
