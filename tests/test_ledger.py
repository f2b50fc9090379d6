"""Transfer ledger: exact copy counts per strategy, and H2D counting in real profiler traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from real_traces import shared_trace

from labkit.attn.ledger import TransferLedger, count_h2d_in_profile, gpu_stream_busy_idle
from labkit.attn.prefix_ranges import make_strategy
from labkit.device import has_cuda

DATA = Path(__file__).resolve().parent / "data"

# 5 batch rows: two with images (ragged), one without, one missing, one padding row
RANGES = {0: [(10, 265), (300, 555), (600, 855)], 1: [(4, 4)], 2: []}
NUM_SEQS = 5
LAYERS = 7
STEPS = 3


def run(name, ranges=RANGES, num_seqs=NUM_SEQS, steps=STEPS, layers=LAYERS, device="cpu"):
    s = make_strategy(name, device)
    for _ in range(steps):
        s.begin_step(ranges, num_seqs)
        for layer in range(layers):
            s.tensor_for_layer(layer)
        s.end_step()
    return s.ledger


def test_per_layer_counts_every_row_on_every_layer():
    rows = run("per_layer").rows()
    assert len(rows) == STEPS
    for r in rows:
        # the old property copied one tensor per batch row, trivial rows included (as [(0,0)]),
        # plus the jagged nested tensor's row lengths, on every layer
        assert r["h2d_count"] == LAYERS * (NUM_SEQS + 1)
        assert r["pageable_count"] == r["sync_count"] == r["h2d_count"]
        assert r["pinned_count"] == 0
        per_layer_bytes = (3 + 1 + 1 + 1 + 1) * 8 + NUM_SEQS * 8
        assert r["h2d_bytes"] == LAYERS * per_layer_bytes


def test_per_layer_copy_rows_by_kind():
    ledger = run("per_layer", steps=1)
    kinds = [c["what"] for c in ledger.copy_rows()]
    assert kinds.count("row") == LAYERS * NUM_SEQS
    assert kinds.count("nested_offsets") == LAYERS
    assert {c["layer"] for c in ledger.copy_rows()} == set(range(LAYERS))


@pytest.mark.parametrize("name, pinned", [("per_step", False), ("pinned", True)])
def test_one_copy_per_step(name, pinned):
    for r in run(name).rows():
        assert r["h2d_count"] == 1
        assert r["h2d_bytes"] == NUM_SEQS * 3 * 8  # padded to 3 ranges per row
        assert r["pinned_count"] == (1 if pinned else 0)
        assert r["sync_count"] == (0 if pinned else 1)


def test_cached_copies_nothing_in_steady_decode():
    rows = run("cached", steps=5).rows()
    assert [r["h2d_count"] for r in rows] == [1, 0, 0, 0, 0]
    assert [r["uploads"] for r in rows] == [1, 0, 0, 0, 0]


@pytest.mark.parametrize("name", ["per_layer", "per_step", "pinned", "cached"])
def test_no_copies_when_every_row_is_trivial(name):
    assert run(name, ranges={1: []}, num_seqs=3).totals()["h2d_count"] == 0


def test_cpu_copies_are_labelled():
    ledger = run("per_step", steps=1)
    assert ledger.rows()[0]["target"] == "cpu-equivalent"
    assert all(c["target"] == "cpu-equivalent" for c in ledger.copy_rows())
    assert TransferLedger("x", "cuda:0").target == "cuda-h2d"


def test_host_time_is_recorded_per_step():
    rows = run("per_step").rows()
    assert all(r["host_ns"] > 0 for r in rows)


def test_ledger_manual_recording():
    led = TransferLedger("manual")
    led.begin_step()
    led.record_copy(16, pinned=False, synchronizing=True, what="row", layer=0)
    led.record_copy(8, pinned=True, synchronizing=False, what="padded")
    led.begin_step()  # closes the first
    led.end_step()
    rows = led.rows()
    assert [r["h2d_count"] for r in rows] == [2, 0]
    assert rows[0]["h2d_bytes"] == 24 and rows[0]["pinned_count"] == 1 and rows[0]["sync_count"] == 1
    assert led.totals()["steps"] == 2


# -- counting H2D copies in profiler traces ---------------------------------------------------

def test_count_in_real_trace_pageable():
    # 16 pageable HtoD copies per the trace collection's README
    got = count_h2d_in_profile(DATA / "hta-critical-path-alexnet-a100.pt.trace.json.gz")
    assert got["pageable_count"] == 16 and got["pinned_count"] == 0 and got["h2d_count"] == 16
    assert got["pageable_bytes"] > 0


def test_count_in_real_trace_pinned():
    got = count_h2d_in_profile(DATA / "hta-trace-diff-control-a100-rank3.memcpy-only.pt.trace.json.gz")
    assert (got["pageable_count"], got["pinned_count"]) == (0, 150)


@pytest.mark.parametrize("path", [DATA / "nvllm-gb10-ten-steps.markers-and-copies.pt.trace.json.gz",
                                  *shared_trace("nvllm-vllm-qwen3.5-27b-nvfp4-flashinfer-gb10-rank0.pt.trace.json.gz")],
                         ids=lambda p: p.name[:40])
def test_count_in_real_vllm_trace(path):
    # 10 pageable and 160 pinned HtoD copies per the trace collection's README (the fixture keeps every copy)
    got = count_h2d_in_profile(path)
    assert (got["pageable_count"], got["pinned_count"]) == (10, 160)


def test_count_hand_made_trace(tmp_path):
    # device copies as Kineto writes them: on a device stream
    trace = {"traceEvents": [
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "ts": 0, "dur": 1,
         "args": {"device": 0, "stream": 7, "bytes": 8}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "ts": 2, "dur": 1,
         "args": {"device": 0, "stream": 7, "bytes": 24}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 3, "dur": 1,
         "args": {"device": 0, "stream": 7, "bytes": 4096}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "ts": 5, "dur": 1,
         "args": {"device": 0, "stream": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 0, "dur": 3},
    ]}
    expected = {"pageable_count": 2, "pinned_count": 1, "h2d_count": 3,
                "pageable_bytes": 32, "pinned_bytes": 4096, "h2d_bytes": 4128}
    assert count_h2d_in_profile(trace) == expected
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    assert count_h2d_in_profile(path) == expected
    assert count_h2d_in_profile(str(path)) == expected


def test_count_bad_input(tmp_path):
    with pytest.raises(ValueError):
        count_h2d_in_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError):
        count_h2d_in_profile(bad)
    with pytest.raises(ValueError):
        count_h2d_in_profile(42)


def test_busy_idle_hand_made():
    ev = lambda ts, dur, stream=7, cat="kernel": {"ph": "X", "cat": cat, "name": "k", "ts": ts, "dur": dur,
                                                 "args": {"device": 0, "stream": stream}}
    trace = {"traceEvents": [ev(0, 10), ev(15, 5), ev(18, 12, cat="gpu_memcpy"), ev(40, 2),
                             ev(0, 100, stream=9),
                             {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 999}]}
    rows = {r["stream"]: r for r in gpu_stream_busy_idle(trace)}
    # stream 7: [0,10] [15,30] (merged) [40,42] -> busy 10 + 15 + 2, gaps 5 + 10
    assert rows[7]["busy_us"] == 27 and rows[7]["idle_us"] == 15 and rows[7]["span_us"] == 42
    assert rows[9]["busy_us"] == 100 and rows[9]["idle_us"] == 0


def test_busy_idle_real_trace_is_consistent():
    for r in gpu_stream_busy_idle(DATA / "hta-critical-path-alexnet-a100.pt.trace.json.gz"):
        assert r["busy_us"] + r["idle_us"] == pytest.approx(r["span_us"])
        assert r["busy_us"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU to profile real H2D copies")
@pytest.mark.parametrize("name", ["per_layer", "per_step", "pinned", "cached"])
def test_ledger_matches_profiler_on_gpu(name):
    from torch.profiler import ProfilerActivity, profile

    s = make_strategy(name, "cuda")
    s.begin_step(RANGES, NUM_SEQS)  # warm-up step outside the profile
    s.tensor_for_layer(0)
    s.end_step()
    s.ledger.reset()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            s.begin_step(RANGES, NUM_SEQS)
            for layer in range(LAYERS):
                s.tensor_for_layer(layer)
            s.end_step()
        torch.cuda.synchronize()
    got = count_h2d_in_profile(prof)
    totals = s.ledger.totals()
    assert got["pageable_count"] == totals["pageable_count"]
    assert got["pinned_count"] == totals["pinned_count"]


def _raw_stream_busy_idle(path) -> dict:
    """Per (device, stream): device events, busy (union) and span, from the raw JSON with the standard
    library: an independent count of what the three figures below must say."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    by: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            a = e["args"]
            by.setdefault((a["device"], a["stream"]), []).append((e["ts"], e["ts"] + e["dur"]))
    out = {}
    for key, iv in by.items():
        iv.sort()
        busy, cur_s, cur_e = 0.0, *iv[0]
        for s, e in iv[1:]:
            if s > cur_e:
                busy, cur_s, cur_e = busy + cur_e - cur_s, s, e
            else:
                cur_e = max(cur_e, e)
        busy += cur_e - cur_s
        span = max(e for _, e in iv) - iv[0][0]
        out[key] = {"events": len(iv), "busy_us": busy, "span_us": span, "idle_us": span - busy}
    return out


def test_ledger_and_engine_idle_equal_labkit_analyze(tmp_path, capsys):
    """One trace stack: the ledger's per-stream figures, an engine row's device_idle_frac and what
    `labkit analyze` writes for the same (simulated engine) trace all equal busy and idle counted
    from the raw JSON (stream by stream: the union of its device events, and the rest of its span)."""
    from labkit.cli import main as labkit_main
    from labkit.engine.runs import _trace_idle, run_variants
    from labkit.engine.device.profiles import parametric_profile

    rows, traces = run_variants("sim", [("tensor", "loop", "per_layer", True)], model="tiny", workload="small",
                                num_requests=4, steps=2, warmup=1, profile=parametric_profile(), trace_dir=tmp_path)
    trace = rows[0]["trace"]
    raw = _raw_stream_busy_idle(trace)
    assert raw and all(r["idle_us"] > 0 for r in raw.values()), "the per_layer copies leave gaps on the stream"
    out = tmp_path / "a.json"
    assert labkit_main(["analyze", trace, "--json", str(out)]) == 0
    capsys.readouterr()
    streams = json.loads(out.read_text())["streams"]
    ledger = {(r["device"], r["stream"]): r for r in gpu_stream_busy_idle(trace)}
    assert set(ledger) == {(s["device"], s["stream"]) for s in streams} == set(raw)
    for s in streams:
        want, r = raw[(s["device"], s["stream"])], ledger[(s["device"], s["stream"])]
        for got in ({"events": s["ops_count"], "busy_us": s["busy_us"], "idle_us": s["idle_us"], "span_us": s["span_us"]},
                    {k: r[k] for k in ("events", "busy_us", "idle_us", "span_us")}):
            assert got == pytest.approx(want), (got, want)
    busiest = max(raw.values(), key=lambda r: r["busy_us"])
    assert _trace_idle(trace)["device_idle_frac"] == pytest.approx(busiest["idle_us"] / busiest["span_us"])
