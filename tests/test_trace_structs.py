"""The msgspec batch path (``labkit.trace.read.structs``) gives exactly the tables of the stdlib json path."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import labkit.trace.read.reader as reader
from labkit.trace.read import structs
from labkit.trace.read.load import load_trace

pytestmark = pytest.mark.skipif(not structs.AVAILABLE, reason="msgspec is not installed (optional decoder)")

DATA = Path(__file__).resolve().parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
LAB = Path(__file__).resolve().parents[1] / "data" / "traces"
ALL = (sorted(DATA.glob("*.pt.trace.json.gz")) + (sorted(SHARED.glob("*.pt.trace.json.gz")) if SHARED.is_dir() else [])
       + sorted(LAB.rglob("*.pt.trace.json.gz"))[:3])


def _load_both(path, monkeypatch):
    """``(stdlib, msgspec, batches taken by the struct path, batches declined)``."""
    monkeypatch.setattr(reader, "DECODER", "json")
    ref = load_trace(path, skip_malformed=True)  # the paths are compared here, not the malformed policy
    monkeypatch.setattr(reader, "DECODER", "msgspec")
    taken = {"ok": 0, "declined": 0}
    real = reader.add_struct_batch

    def counting(*a):
        r = real(*a)
        taken["ok" if r else "declined"] += 1
        return r

    monkeypatch.setattr(reader, "add_struct_batch", counting)
    fast = load_trace(path, skip_malformed=True)
    return ref, fast, taken


def _assert_same(ref, fast):
    pd.testing.assert_frame_equal(ref.events, fast.events)  # dtypes and categorical order included
    pd.testing.assert_frame_equal(ref.threads, fast.threads)
    assert ref.stats == fast.stats
    assert ref.metadata == fast.metadata


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_real_traces_identical_tables(path, monkeypatch):
    ref, fast, taken = _load_both(path, monkeypatch)
    _assert_same(ref, fast)
    assert taken["ok"] >= 1 and taken["declined"] == 0  # real Kineto text takes the fast path
    assert len(fast.events) > 0


def _ev(**kw):
    e = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 2, "ts": 10, "dur": 5}
    e.update(kw)
    return e


CLEAN = [  # unusual but well-typed: the struct path must handle these itself
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "python"}},
    {"ph": "M", "name": "thread_sort_index", "pid": "1", "tid": "stream 7", "args": {"sort_index": 3}},
    {"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": "x"}},
    {"ph": "M", "name": "process_name", "pid": 1, "args": None},
    _ev(cat="Trace", name="PyTorch Profiler (0)"),
    _ev(cat="kernel", name="k", pid=0, tid="stream 7", ts=12.25, dur=1.5,
        args={"correlation": 7, "External id": 3, "stream": 7, "device": 0, "grid": [4, 1, 1], "block": [128, 1, 1]}),
    _ev(cat="gpu_memcpy", name="Memcpy HtoD (Pageable -> Device)", pid=0, tid=7, ts=20, dur=2,
        args={"correlation": "8", "stream": 7, "bytes": 4096}),
    _ev(cat="cuda_runtime", name="cudaMemcpyAsync", args={"correlation": 8, "External id": "3"}),
    _ev(cat="cpu_op", name="aten::mm", pid="host", args={"External id": 3, "correlation": 99}),
    _ev(cat=None, name="anon", args={"grid": "weird", "stream": None}),
    _ev(cat="", name="n2", ts=2 ** 60, dur=0),
    _ev(cat="kernel", name="k", args={"grid": 96, "block": [], "device": "1"}),
    {"ph": "s", "id": 5, "pid": 1, "tid": 2, "ts": 11, "cat": "ac2g", "name": "launch"},
    {"ph": "f", "id": "5", "pid": 0, "tid": 7, "ts": 12.5, "cat": "ac2g", "bp": "e"},
    {"ph": "t", "id": 2 ** 70, "pid": 0, "tid": 7, "ts": 13, "cat": "new_flow_cat"},
    {"ph": "i", "name": "instant", "pid": 1, "tid": 2, "ts": 14, "s": "t"},
    {"ph": "C", "name": "counter", "pid": 1, "ts": 15, "args": {"x": 1}},
    {"ph": None, "ts": 1},
    {"name": "no phase"},
    _ev(cat="user_annotation", name="op"),
    _ev(pid=2 ** 64, tid=-2 ** 63 - 1),  # beyond int64: -1 like the stdlib rule
    # keys the tables do not keep, however odd their values: skipped by both paths
    _ev(cat="kernel", args={"grid": [[1, 2], 3], "block": {"a": 1}, "External id": 3.5}),
    _ev(cat="kernel", args={"grid": [1.0, 1, 1], "block": [True, 1, 1]}),
    _ev(cat="kernel", args={"correlation": 2 ** 63, "stream": 2 ** 63 - 1}),
]

DECLINED = [  # anything the stdlib path skips or reads differently: the batch goes back to json
    [_ev(dur=-1)],
    [_ev(ts="5")],
    [_ev(dur=None)],
    [_ev(ts=10 ** 400)],
    [_ev(args=[1, 2])],
    [_ev(pid=True)],
    [_ev(name=17)],
    [_ev(name=None)],
    [[1, 2, 3]],
    [_ev(cat=["weird"])],
    [{"ph": "s", "id": 1, "ts": None}],
    [_ev(args={"stream": {"nested": 1}})],
    [_ev(cat="kernel", args={"stream": 7.0, "External id": 3.5})],  # floats in integer fields
    [_ev(tid=2.0)],
]


def _write(tmp_path, events, name="t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events, "schemaVersion": 1}), encoding="utf-8")
    return p


def test_unusual_but_clean_events(tmp_path, monkeypatch):
    events = CLEAN * 40  # several hundred events: one batch
    ref, fast, taken = _load_both(_write(tmp_path, events), monkeypatch)
    _assert_same(ref, fast)
    assert taken == {"ok": 1, "declined": 0}
    # hand-checked values of the stdlib rules
    ev = fast.events
    k = ev[ev["cat"] == "kernel"].iloc[0]
    assert (k["tid"], k["stream"], k["ts_us"]) == (-1, 7, 12.25)
    m = ev[ev["cat"] == "gpu_memcpy"].iloc[0]
    assert (m["correlation"], m["stream"], m["bytes"], m["device"]) == (8, 7, 4096, 0)
    assert ev[ev["cat"] == "cpu_op"]["correlation"].eq(-1).all()  # host rows never carry a correlation
    assert "Trace" not in set(ev["cat"].astype(str))
    assert fast.stats.ts_float and fast.stats.ts_missing


@pytest.mark.parametrize("bad", DECLINED, ids=range(len(DECLINED)))
def test_declined_batches_match_stdlib(tmp_path, monkeypatch, bad):
    events = CLEAN * 10 + bad + CLEAN * 10
    ref, fast, taken = _load_both(_write(tmp_path, events), monkeypatch)
    _assert_same(ref, fast)
    assert taken["ok"] == 0  # the one batch was declined (or not decoded by msgspec at all)


def test_mixed_batches_keep_interning_order(tmp_path, monkeypatch):
    """A declined batch between clean ones: codes and categories stay in file order."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    events = CLEAN * 30 + [_ev(dur=-1, name="late")] + [_ev(name=f"n{i}", cat=f"c{i % 7}") for i in range(300)]
    ref, fast, taken = _load_both(_write(tmp_path, events), monkeypatch)
    _assert_same(ref, fast)
    assert taken["ok"] >= 2 and taken["declined"] >= 1
