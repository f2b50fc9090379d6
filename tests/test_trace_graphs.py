"""CUDA-graph replays as units and device idle from real gaps only, against hand-counted truth.

Each hand-built trace reproduces one failure mode seen in other trace tools:
kernels that share their graph launch's correlation id (HTA#290, TraceLens#827), a replay spread
over two streams (TraceLens#728: per-stream idle summed on a busy device) and a replay whose
kernels were not recorded (the device looks idle while it ran them).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from labkit.trace import Trace
from labkit.trace.analysis.device.bubbles import device_ops
from labkit.trace.analysis.device.cuda_graphs import device_gaps, device_idle, graph_replays, replay_index, graph_launches
from labkit.trace.read.load import load_trace

DATA = Path(__file__).resolve().parent / "data"
NVLLM_STEP = DATA / "nvllm-gb10-one-step.trimmed.pt.trace.json.gz"


def _rt(name, ts, dur, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def _k(name, ts, dur, corr, stream=7):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream, "device": 0}}


def _write(tmp_path, events, name="g.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_kernels_sharing_the_launch_correlation_are_one_replay(tmp_path):
    # cudaGraphLaunch at 100 (corr 1) -> k1 [120,150], k2 [155,185], k3 [185,200]; then an eager
    # cudaLaunchKernel at 300 (corr 2) -> k4 [310,330].
    ev = [_rt("cudaGraphLaunch", 100, 10, 1), _k("k1", 120, 30, 1), _k("k2", 155, 30, 1), _k("k3", 185, 15, 1),
          _rt("cudaLaunchKernel", 300, 5, 2), _k("k4", 310, 20, 2)]
    tr = load_trace(_write(tmp_path, ev))
    ops = device_ops(tr)
    assert replay_index(ops, graph_launches(tr)).tolist() == [0, 0, 0, -1]
    r = graph_replays(tr, ops).iloc[0]
    # hand count: 3 ops, span 120..200 = 80, busy 30 + 30 + 15 = 75, gap 5, first op 20 us after the call
    assert (r["ops_count"], r["first_ts_us"], r["last_end_us"]) == (3, 120, 200)
    assert (r["span_us"], r["busy_us"], r["gaps_us"], r["launch_to_start_us"]) == (80, 75, 5, 20)
    assert r["streams"] == "7" and bool(r["recorded"])
    gaps = device_gaps(ops, graph_replays(tr, ops))
    # [150,155]: 5 us, k2 was queued (its launch at 100 is before the gap) -> kernel wait;
    # [200,310]: k4's launch at 300 came after the device drained -> host wait, 110 us
    assert gaps[["start_us", "end_us", "category", "replay"]].values.tolist() == [
        [150, 155, "kernel_wait", 0], [200, 310, "host_wait", -1]]
    dev = device_idle(ops, gaps).iloc[0]
    assert (dev["span_us"], dev["idle_us"], dev["busy_us"]) == (210, 115, 95)


def test_replay_over_two_streams_is_not_idle(tmp_path):
    # one replay: stream 7 runs [10,20] and [40,50], stream 8 runs [18,42] in between
    ev = [_rt("cudaGraphLaunch", 0, 5, 1), _k("a", 10, 10, 1, 7), _k("b", 18, 24, 1, 8), _k("c", 40, 10, 1, 7)]
    an = Trace(_write(tmp_path, ev))
    per_stream = {int(r.stream): r.idle_us for r in an.idle().itertuples()}
    assert per_stream == {7: 20.0, 8: 0.0}  # stream 7 alone has a 20 us gap...
    dev = an.devices().iloc[0]
    assert dev["idle_us"] == 0 and dev["busy_us"] == 40  # ...but the device was busy from 10 to 50
    assert dev["per_stream_idle_sum_us"] == 20 and dev["streams_count"] == 2
    r = an.replays().iloc[0]
    assert r["streams"] == "7,8" and r["busy_us"] == 40 and r["gaps_us"] == 0


def test_unrecorded_replay_is_not_counted_as_idle(tmp_path):
    # L1 at 0 -> [10,50]; L2 at 55 recorded no kernels; L3 at 60 -> [200,240]; an eager kernel
    # launched at 400 -> [400,410]. The gap [50,200] is where L2's work ran (first gap ending after
    # 55): unrecorded, not idle. The gap [240,400] is a real host wait.
    ev = [_rt("cudaGraphLaunch", 0, 5, 1), _k("a", 10, 40, 1), _rt("cudaGraphLaunch", 55, 3, 2),
          _rt("cudaGraphLaunch", 60, 3, 3), _k("b", 200, 40, 3), _rt("cudaLaunchKernel", 400, 2, 4), _k("c", 400, 10, 4)]
    an = Trace(_write(tmp_path, ev))
    assert an.replays()["ops_count"].tolist() == [1, 0, 1]
    assert an.replays()["recorded"].tolist() == [True, False, True]
    gaps = an.device_gaps()
    assert gaps[["start_us", "end_us", "category"]].values.tolist() == [[50, 200, "unrecorded"],
                                                                       [240, 400, "host_wait"]]
    dev = an.devices().iloc[0]
    assert (dev["span_us"], dev["idle_us"], dev["unrecorded_us"], dev["busy_us"]) == (400, 160, 150, 90)
    doc = an.to_json()
    assert doc["graphs"]["launches_count"] == 3 and doc["graphs"]["unrecorded_count"] == 1
    assert doc["summary"]["graph_ops_count"] == 2


def test_trace_without_graphs_has_no_replays():
    an = Trace(DATA / "hta-triton-example-a100.pt.trace.json.gz")
    assert len(an.replays()) == 0 and an.to_json()["graphs"]["launches_count"] == 0
    # one stream: device idle equals the stream's idle
    assert an.devices()["idle_us"].sum() == pytest.approx(an.idle()["idle_us"].sum())


def test_real_vllm_graph_trace_against_raw_json():
    """The trimmed vLLM trace: ops per replay counted straight from the JSON by correlation id."""
    with gzip.open(NVLLM_STEP, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    per_corr = Counter(e["args"]["correlation"] for e in events
                       if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"]["correlation"] in launches)
    an = Trace(NVLLM_STEP)
    got = dict(zip(an.replays()["correlation"], an.replays()["ops_count"]))
    assert len(got) == len(launches) == 65
    assert got == {c: per_corr.get(c, 0) for c in launches}
    # every graph-launched op carries a non-zero graph id in this trace: they are exactly the replay ops
    graph_kernels = sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")
                        and e["args"].get("graph id", 0) != 0)
    assert int(an.replays()["ops_count"].sum()) == graph_kernels
    dev = an.devices().iloc[0]
    assert dev["idle_us"] <= an.idle()["idle_us"].min() + 1e-6
    assert dev["unrecorded_us"] == 0


def test_analysis_ops_carry_their_replay(tmp_path):
    ev = [_rt("cudaGraphLaunch", 0, 5, 1), _k("a", 10, 10, 1), _rt("cudaLaunchKernel", 30, 2, 2), _k("e", 40, 5, 2),
          _rt("cudaGraphLaunch", 50, 5, 3), _k("b", 60, 10, 3), _k("c", 75, 10, 3)]
    an = Trace(_write(tmp_path, ev))
    assert dict(zip(an.ops()["name"], an.ops()["replay"])) == {"a": 0, "e": -1, "b": 1, "c": 1}
    unit = an.ops()[an.ops()["replay"] == 1]
    assert unit["name"].tolist() == ["b", "c"] and an.replays().loc[1, "gaps_us"] == 5


def test_many_replays_interleaved_against_a_brute_force_union(tmp_path):
    """Several replays whose ops arrive interleaved, out of start order, nested and on two streams: each
    replay's first/last/busy/device/streams equal a per-microsecond count of the time its ops cover."""
    # (replay launch correlation, kernel name, start, duration, stream); replay 4 has a single op, 5 none
    ops = [(1, "a", 100, 30, 7), (2, "b", 105, 10, 8), (1, "c", 90, 5, 7), (1, "d", 110, 5, 8),
           (3, "e", 300, 50, 7), (2, "f", 140, 20, 8), (3, "g", 310, 10, 8), (1, "h", 160, 10, 7),
           (3, "i", 360, 5, 7), (4, "j", 500, 7, 8), (2, "k", 150, 5, 7), (3, "l", 349, 3, 8)]
    ev = [_rt("cudaGraphLaunch", 10 * c, 2, c) for c in (1, 2, 3, 4, 5)]
    ev += [_k(name, ts, dur, corr, stream) for corr, name, ts, dur, stream in ops]
    tr = load_trace(_write(tmp_path, ev))
    r = graph_replays(tr, device_ops(tr)).set_index("correlation")
    for corr in (1, 2, 3, 4):
        mine = [(ts, ts + dur, stream) for c, _, ts, dur, stream in ops if c == corr]
        covered = {t for s, e, _ in mine for t in range(s, e)}  # integer us: every op starts and ends on one
        row = r.loc[corr]
        assert row["ops_count"] == len(mine)
        assert (row["first_ts_us"], row["last_end_us"]) == (min(s for s, _, _ in mine), max(e for _, e, _ in mine))
        assert row["busy_us"] == len(covered)
        assert row["gaps_us"] == row["span_us"] - len(covered)
        assert row["streams"] == ",".join(str(s) for s in sorted({s for _, _, s in mine}))
        assert row["device"] == 0
    assert r.loc[5, "ops_count"] == 0 and not r.loc[5, "recorded"] and r.loc[5, "busy_us"] == 0
