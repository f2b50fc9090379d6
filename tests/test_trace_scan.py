"""The compiled columnar scanner (``labkit.trace.read.scan``): its numbers are those json reads, its tables
those of the stdlib json path (real traces, unusual events, any events), a batch it declines leaves nothing
behind and reads as the stdlib path reads it."""

from __future__ import annotations

import json
import math
import random
from decimal import Decimal, getcontext
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import labkit.trace.read.reader as reader
from labkit.trace.read import scan
from labkit.trace.read.columns import ColumnStore, LoadStats
from labkit.trace.read.load import load_trace

pytestmark = pytest.mark.skipif(not scan.AVAILABLE, reason="the compiled scanner is not built (no C compiler)")


def _scan_text(events_text: str, cols: ColumnStore | None = None, stats: LoadStats | None = None):
    """``(events read or None, store, stats)`` of the scanner on ``events_text`` (events separated by commas)."""
    cols = cols if cols is not None else ColumnStore()
    stats = stats if stats is not None else LoadStats()
    buf = bytearray(events_text.encode("utf-8"))  # beyond ASCII: the reader has checked it is UTF-8
    return scan.add_scanned_batch(cols, buf, 0, len(buf), 0, stats, utf8=not events_text.isascii()), cols, stats


def _ts_of(texts: list[str]) -> np.ndarray | None:
    got, cols, _ = _scan_text(",".join(f'{{"ph": "X", "name": "n", "ts": {t}, "dur": 0}}' for t in texts))
    return None if got is None else cols.columns()[4]


def _near_halfway(rng: random.Random) -> list[str]:
    """Decimal texts of 15-19 significant digits at and beside the point halfway between two neighbouring
    doubles: where rounding twice (to 64 bits, then to 53) goes wrong."""
    getcontext().prec = 60
    out = []
    for _ in range(400):
        d = rng.uniform(1e3, 1e16) if rng.random() < 0.7 else rng.uniform(1e-6, 1e3)
        mid = (Decimal(d) + Decimal(math.nextafter(d, math.inf))) / 2
        digits = rng.randint(15, 19)
        q = Decimal(10) ** (mid.adjusted() - digits + 1)
        base = mid.quantize(q)
        for k in (-1, 0, 1):
            out.append(format(base + k * q, "f"))
    return out


def test_numbers_are_those_json_reads():
    rng = random.Random(7)
    texts = _near_halfway(rng)
    texts += [repr(rng.uniform(0, 1e13)) for _ in range(500)]  # shortest round-trip forms
    texts += [f"{rng.randrange(10 ** 12, 10 ** 13)}.{rng.randrange(10 ** 6):06d}" for _ in range(500)]  # ns, 19 digits
    texts += ["0", "-0", "-0.0", "0.0", "1e0", "1E+2", "-2.5e-3", "123456789012345678", "9223372036854775807",
              "-9223372036854775808", "1e22", "1e23", "4.9e-324", "2.2250738585072014e-308", "1.7976931348623157e307",
              "0.1", "0.30000000000000004", "9007199254740993", "9007199254740993.0", "1037948500003.9242",
              "1712195495519689.047", "12345678901234567890123.5", "1.00000000000000011102230246251565404236316680908203125"]
    got = _ts_of(texts)
    want = np.array([float(json.loads(t)) for t in texts])  # the json reading: "-0" is the int 0
    assert got is not None
    bad = [t for t, a, b in zip(texts, got, want) if a != b or math.copysign(1, a) != math.copysign(1, b)]
    assert not bad, bad[:5]


@pytest.mark.parametrize("text", ["01", "1.", ".5", "1e", "+1", "-", "1.5e+", "NaN", "Infinity", "-Infinity", "0x10",
                                  "1e400", "-1e400"])
def test_numbers_outside_json_or_the_columns_decline(text):
    assert _ts_of(["1.5", text]) is None


def test_declined_batch_leaves_the_store_and_stats_as_they_were():
    cols, stats = ColumnStore(), LoadStats()
    got, *_ = _scan_text('{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "dur": 2}', cols, stats)
    assert got == 1
    before = (cols.n, list(cols.names.values), list(cols.cats.values), dict(cols.kind), stats.n_complete)
    text = ('{"ph": "X", "cat": "cpu_op", "name": "new", "ts": 3.5, "dur": 1}, '
            '{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "t"}}, '
            '{"ph": "X", "name": "b", "ts": 1, "dur": -1}')  # the last one add_event skips
    got, *_ = _scan_text(text, cols, stats)
    assert got is None
    assert (cols.n, cols.names.values, cols.cats.values, cols.kind, stats.n_complete) == before
    assert cols.threads == [] and not stats.ts_float


def test_rows_past_the_reservation_grow_the_store():
    cols = ColumnStore()
    cols.reserve(4)
    text = ",".join(f'{{"ph":"X","name":"n{i % 3}","ts":{i},"dur":1}}' for i in range(50))
    got, cols, stats = _scan_text(text, cols)
    assert got == 50 and stats.n_complete == 50
    cat, name, pid, tid, ts, dur, stream, device, corr, nbytes, index = cols.columns()
    assert ts.tolist() == list(range(50)) and index.tolist() == list(range(50))
    assert [cols.names.values[c] for c in name[:4]] == ["n0", "n1", "n2", "n0"]
    assert pid.tolist() == [-1] * 50 and corr.tolist() == [-1] * 50


def test_hand_worked_rows():
    """Each kind of row, as add_event's rules give it (worked out by hand)."""
    text = ", ".join([
        '{"ph": "X", "cat": "kernel", "name": "k\\u00e9", "pid": 0, "tid": " 7 ", "ts": 5.25, "dur": 2, '
        '"args": {"correlation": "12", "stream": 7, "grid": [1, {"x": null}], "bytes": null}}',
        '{"ph": "X", "cat": "cuda_runtime", "name": "launch", "pid": "1_0", "tid": "t7", "ts": 4, "dur": 1, '
        '"args": {"correlation": 12, "stream": 3, "device": 9}}',
        '{"ph": "X", "cat": "gpu_memcpy", "name": "copy", "pid": 2, "tid": 9, "ts": 6, "dur": 1, '
        '"args": {"device": "3", "bytes": 4096}}',
        '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": true, "tid": [1], "ts": 1, "dur": 0, '
        '"args": {"correlation": 5}}',
        '{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "ts": 0, "dur": 9}',
        '{"ph": "s", "id": 1, "ts": 4}', '{"ph": "i", "ts": 2}', '{"name": "no phase"}',
    ])
    got, cols, stats = _scan_text(text)
    assert got == 8
    cat, name, pid, tid, ts, dur, stream, device, corr, nbytes, index = (c.tolist() for c in cols.columns())
    assert [cols.cats.values[c] for c in cat] == ["kernel", "cuda_runtime", "gpu_memcpy", "cpu_op"]
    assert [cols.names.values[c] for c in name] == ["k\u00e9", "launch", "copy", "op"]
    assert pid == [0, 10, 2, -1] and tid == [7, -1, 9, -1]
    assert ts == [5.25, 4.0, 6.0, 1.0] and dur == [2.0, 1.0, 1.0, 0.0]
    assert corr == [12, 12, -1, -1]  # host rows never carry one
    assert stream == [7, -1, -1, -1] and nbytes == [-1, -1, 4096, -1]
    assert device == [0, -1, 3, -1]  # a device row without args.device: its pid
    assert index == [0, 1, 2, 3]
    assert (stats.n_complete, stats.n_flows, stats.n_other) == (4, 1, 3)
    assert stats.ts_float and stats.ts_missing


# ---- whole files: the tables of the stdlib path ----

DATA = Path(__file__).resolve().parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
LAB = Path(__file__).resolve().parents[1] / "data" / "traces"
ALL = (sorted(DATA.glob("*.pt.trace.json.gz")) + (sorted(SHARED.glob("*.pt.trace.json.gz")) if SHARED.is_dir() else [])
       + sorted(LAB.rglob("*.pt.trace.json.gz"))[:3])


def _load_both(path, monkeypatch):
    """``(stdlib tables, the scanner's tables, {"ok": batches it took, "declined": batches it declined})``."""
    monkeypatch.setattr(reader, "DECODER", "json")
    ref = load_trace(path, skip_malformed=True)  # the paths are compared here, not the malformed policy
    monkeypatch.setattr(reader, "DECODER", "native")
    taken = {"ok": 0, "declined": 0}
    real = scan.add_scanned_batch

    def counting(*a, **kw):
        r = real(*a, **kw)
        taken["ok" if r is not None else "declined"] += 1
        return r

    monkeypatch.setattr(scan, "add_scanned_batch", counting)
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


CLEAN = [  # unusual but well-typed: the scanner must take these itself
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

DECLINED = [  # the stdlib path skips these, or reads a type the scanner leaves to it: the same tables
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
    if ref.stats.skipped:  # an event the stdlib path skips: the scanner declined the batch
        assert taken["ok"] == 0


def test_mixed_batches_keep_interning_order(tmp_path, monkeypatch):
    """A declined batch between clean ones: codes and categories stay in file order."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    events = CLEAN * 30 + [_ev(dur=-1, name="late")] + [_ev(name=f"n{i}", cat=f"c{i % 7}") for i in range(300)]
    ref, fast, taken = _load_both(_write(tmp_path, events), monkeypatch)
    _assert_same(ref, fast)
    assert taken["ok"] >= 2 and taken["declined"] >= 1


# ---- any events: the rows of add_event ----

_INTS = st.one_of(st.integers(-5, 300), st.integers(-2 ** 64, 2 ** 64), st.sampled_from([2 ** 63 - 1, -2 ** 63, 2 ** 63]))
_TEXT = st.one_of(st.sampled_from(["7", " 12 ", "-3", "+4", "1_000", "1__0", "_1", "007", "stream 7", "", "x", "9" * 25]),
                  st.text(max_size=6))
_ANY = st.one_of(st.none(), st.booleans(), _INTS, st.floats(allow_nan=False), _TEXT,
                 st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2))
_MISSING = object()
_ARGS = st.dictionaries(st.sampled_from(["correlation", "stream", "device", "bytes", "name", "sort_index", "External id",
                                         "grid"]), st.one_of(_INTS, _TEXT, st.none()), max_size=5)


@st.composite
def _event(draw):
    """Mostly events add_event keeps, each field now and then anything at all (or missing)."""
    def field(usual):
        k = draw(st.integers(0, 19))
        return _MISSING if k == 0 else draw(_ANY) if k == 1 else draw(usual)

    fields = {
        "ph": field(st.sampled_from(["X"] * 6 + ["M", "s", "f", "t", "i", "C", "XX", ""])),
        "cat": field(st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op",
                                      "user_annotation", "Trace", "", "Kernel", "ker\"nel"])),
        "name": field(st.one_of(st.sampled_from(["aten::mm", "k", "thread_name", "process_name"]), st.text(max_size=5))),
        "pid": field(st.one_of(_INTS, _TEXT, st.sampled_from(["\u0661\u0662", "\u00a012", "12\u3000"]))),  # int() reads these
        "tid": field(st.one_of(_INTS, _TEXT)),
        "ts": field(st.one_of(st.integers(-10 ** 15, 10 ** 15), st.floats(-1e15, 1e15))),
        "dur": field(st.one_of(st.integers(0, 10 ** 6), st.floats(0, 1e6))),
        "args": field(_ARGS),
        "id": field(_INTS),
    }
    order = draw(st.permutations(list(fields)))
    return {k: fields[k] for k in order if fields[k] is not _MISSING}


def _by_add_event(events: list) -> tuple[ColumnStore, LoadStats]:
    cols, stats = ColumnStore(), LoadStats()
    for i, e in enumerate(events):
        cols.add_event(i, e, stats)
    cols.flush(stats)
    return cols, stats


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_event(), min_size=1, max_size=30), indent=st.sampled_from([None, 0, 3]), compact=st.booleans(),
       escape=st.booleans())
def test_any_events_give_the_rows_of_add_event(events, indent, compact, escape):
    seps = (",", ":") if compact else (", ", ": ")
    text = ",".join(json.dumps(e, indent=indent, separators=seps, ensure_ascii=escape) for e in events)
    ref, ref_stats = _by_add_event(json.loads(f"[{text}]"))
    got, cols, stats = _scan_text(text)
    if ref_stats.skipped:  # an event add_event skips: the scanner leaves the batch to the general decoders
        assert got is None
    if got is None:
        return
    assert got == len(events)
    for a, b in zip(ref.columns(), cols.columns()):
        np.testing.assert_array_equal(a, b)
    assert (ref.cats.values, ref.names.values, ref.kind, ref.threads) == (cols.cats.values, cols.names.values, cols.kind,
                                                                         cols.threads)
    assert ref_stats == stats


@pytest.mark.parametrize("event", [
    '{"ph": "X", "name": "a", "ts": 1, "ts": 2, "dur": 1}',  # a repeated key: json keeps the last
    '{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "dur": 1, "args": {"stream": 1, "stream": 2}}',
    '{"ph": "X", "n\\u0061me": "a", "ts": 1, "dur": 1}',  # an escaped key
    '{"ph": "\\u0058", "name": "a", "ts": 1, "dur": 1}',  # an escaped phase
    '{"ph": "X", "cat": "k\\u0065rnel", "name": "a", "ts": 1, "dur": 1, "args": {"stream": 4}}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"x": ' + "[" * 80 + "]" * 80 + '}}',  # deep nesting
    '{"ph": "X", "name": "a", "ts": NaN, "dur": 1}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"v": -Infinity}}',
    '{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "dur": 1, "args": {"stream": 7.0}}',
    '{"ph": "X", "name": "a", "pid": 1.0, "ts": 1, "dur": 1}',
])
def test_text_the_scanner_declines_reads_as_the_stdlib_path(event, tmp_path, monkeypatch):
    """Strict-JSON corners and spellings the scanner leaves to the general decoders: the same tables."""
    assert _scan_text(event)[0] is None
    _assert_reads_as_stdlib(event, tmp_path, monkeypatch)


def test_escaped_names_read_as_the_stdlib_path(tmp_path, monkeypatch):
    """Names with escapes (a lone surrogate too) are taken, decoded as json decodes them."""
    event = '{"ph": "X", "name": "a\\ud800\\n\\u00e9\\"", "ts": 1, "dur": 1}'
    assert _scan_text(event)[0] == 1
    _assert_reads_as_stdlib(event, tmp_path, monkeypatch)


def _assert_reads_as_stdlib(event, tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    events = ", ".join(['{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1}'] * 300 + [event] +
                       ['{"ph": "X", "cat": "cpu_op", "name": "late", "ts": 2, "dur": 1}'] * 300)
    path.write_text('{"traceEvents": [' + events + "]}", encoding="ascii")
    monkeypatch.setattr(reader, "DECODER", "json")
    ref = load_trace(path, skip_malformed=True)
    monkeypatch.setattr(reader, "DECODER", "native")
    got = load_trace(path, skip_malformed=True)
    pd.testing.assert_frame_equal(ref.events, got.events)
    assert ref.stats == got.stats
