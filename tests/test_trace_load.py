"""The streaming Kineto loader against a plain json+gzip reading of real traces, and its bad-input policy."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from labkit.errors import UsageError
from labkit.trace.read.load import load_trace

DATA = Path(__file__).resolve().parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
LOCAL = sorted(DATA.glob("*.pt.trace.json.gz"))
ALL = LOCAL + (sorted(SHARED.glob("*.pt.trace.json.gz")) if SHARED.is_dir() else [])


def _plain(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_loader_matches_plain_json(path):
    doc = _plain(path)
    events = doc["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X" and e.get("cat") != "Trace"]
    tr = load_trace(path)
    assert tr.stats.n_events == len(events)
    assert tr.stats.skipped == 0
    assert len(tr.events) == len(complete)
    assert Counter(tr.events["cat"].astype(str)) == Counter(str(e.get("cat")) for e in complete)
    assert tr.stats.n_flows == sum(1 for e in events if e.get("ph") in ("s", "f", "t"))
    # spot-check fields of device events against the raw JSON
    dev = [e for e in complete if e.get("cat") in ("kernel", "gpu_memcpy")][:50]
    got = tr.events[tr.events["cat"].isin(["kernel", "gpu_memcpy"])].head(50)
    for e, row in zip(dev, got.itertuples()):
        assert row.name == e["name"]
        assert row.ts_us == pytest.approx(e["ts"], abs=0)
        assert row.dur_us == pytest.approx(e["dur"], abs=0)
        assert row.stream == e["args"].get("stream", -1)
        assert row.correlation == e["args"].get("correlation", -1)
    assert tr.metadata.get("deviceProperties") == doc.get("deviceProperties")
    assert set(tr.metadata) == set(doc) - {"traceEvents"}


def _write(tmp_path, obj, name="t.json", gz=False) -> Path:
    p = tmp_path / name
    text = obj if isinstance(obj, str) else json.dumps(obj)
    if gz:
        with gzip.open(p, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


def test_bare_array_and_plain_json(tmp_path):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]
    tr = load_trace(_write(tmp_path, ev))
    assert len(tr.events) == 1 and tr.events["name"].iloc[0] == "a"
    tr = load_trace(_write(tmp_path, {"traceEvents": ev, "deviceProperties": []}, "x.json.gz", gz=True))
    assert len(tr.events) == 1 and tr.metadata == {"deviceProperties": []}


def test_malformed_events_are_skipped_and_counted(tmp_path):
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 1, "dur": -2},
        {"ph": "X", "cat": "cpu_op", "name": "nots", "pid": 1, "tid": 1, "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": "strts", "pid": 1, "tid": 1, "ts": "5", "dur": 2},
        [1, 2, 3],
        {"ph": "X", "cat": ["weird"], "name": {"a": 1}, "pid": [1], "tid": None, "ts": 3, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "listargs", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": [1]},
        {"ph": "X", "cat": ["weird"], "name": "kept", "pid": [1], "tid": None, "ts": 3, "dur": 1},
    ]
    path = _write(tmp_path, {"traceEvents": ev})
    with pytest.raises(UsageError, match=r"6 of 8 events are malformed .*first: event 1: negative duration"):
        load_trace(path)
    tr = load_trace(path, skip_malformed=True)
    assert tr.stats.skipped == 6
    assert tr.stats.skip_reasons["negative duration"] == 1
    assert tr.stats.skip_reasons["event is not an object"] == 1
    assert tr.stats.skip_reasons["complete event without a string name"] == 1
    assert tr.stats.skip_reasons["args is not an object"] == 1
    assert [i for i, _ in tr.stats.first_skipped] == [1, 2, 3, 4, 5]
    assert tr.events["name"].tolist() == ["ok", "kept"]
    assert tr.events["pid"].tolist() == [1, -1]


def _events_with_bad(n_good: int, bad: list) -> dict:
    good = [{"ph": "X", "cat": "cpu_op", "name": f"e{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(n_good)]
    return {"traceEvents": good[:5] + bad + good[5:]}


@pytest.mark.parametrize("bad", [
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": -1},
    {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": "1", "dur": 1},
    {"ph": "X", "cat": "kernel", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": "x"},
    {"ph": "s", "id": 1, "pid": 1, "tid": 1},
    7,
], ids=["negative-dur", "no-name", "string-ts", "args-string", "flow-no-ts", "not-object"])
def test_malformed_limit_is_one_in_a_thousand(tmp_path, bad):
    """Two bad events in 2000 (0.1%) are skipped; two in 1999 (just over) are an error."""
    at = _write(tmp_path, _events_with_bad(1998, [bad, bad]), "at.json")
    tr = load_trace(at)
    assert tr.stats.n_events == 2000 and tr.stats.skipped == 2 and len(tr.events) == 1998
    over = _write(tmp_path, _events_with_bad(1997, [bad, bad]), "over.json")
    with pytest.raises(UsageError, match=r"^over.json: 2 of 1999 events are malformed .*first: event 5: "):
        load_trace(over)
    assert load_trace(over, skip_malformed=True).stats.skipped == 2


@pytest.mark.parametrize("doc", [[1, 2, 3], {"traceEvents": [1, 2, 3]}, {"traceEvents": ["a", None]}])
def test_events_that_are_not_objects_are_not_a_trace(tmp_path, doc):
    with pytest.raises(UsageError, match="not a trace"):
        load_trace(_write(tmp_path, doc), skip_malformed=True)


def test_progress_bar_only_on_a_terminal_for_big_files(capsys, monkeypatch):
    import sys

    import labkit.trace.read.streams as streams

    path = DATA / "hta-triton-example-a100.pt.trace.json.gz"
    monkeypatch.setattr(streams, "PROGRESS_MIN_BYTES", 0)  # every file counts as big
    load_trace(path)  # stderr is not a terminal here: silent
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    load_trace(path)
    assert "hta-triton-example-a100" in capsys.readouterr().err
    monkeypatch.setattr(streams, "PROGRESS_MIN_BYTES", 50_000_000)
    load_trace(path)  # a terminal, but a small file: silent
    assert capsys.readouterr().err == ""
    load_trace(path, progress=True)
    assert "hta-triton-example-a100" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    ("", "expected a JSON object"),
    ("hello", "expected a JSON object"),
    ('{"schemaVersion": 1}', "no traceEvents"),
    ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}', "after event 0"),
    ('{"traceEvents": [{"ph": "X", "ts": 1, "dur"', "truncated"),
    ('{"traceEvents": [] } trailing', "extra data"),
    ('{"traceEvents": [{"ph": "X",, "ts": 1}]}', "malformed JSON"),
])
def test_bad_files_raise_usage_error(tmp_path, content, message):
    with pytest.raises(UsageError, match=message):
        load_trace(_write(tmp_path, content))


def test_bad_gzip_and_binary(tmp_path):
    good = (DATA / "hta-triton-example-a100.pt.trace.json.gz").read_bytes()
    p = tmp_path / "trunc.json.gz"
    p.write_bytes(good[: len(good) // 2])
    with pytest.raises(UsageError, match="gzip|truncated"):
        load_trace(p)
    p.write_bytes(b"\xff\xfe\x00garbage" * 10)
    with pytest.raises(UsageError):
        load_trace(p)
    with pytest.raises(UsageError, match="folder"):
        load_trace(tmp_path)
    with pytest.raises(UsageError, match="cannot open"):
        load_trace(tmp_path / "missing.json")


def test_batches_cross_chunk_boundaries(tmp_path, monkeypatch):
    """Tiny refills force every event to straddle buffer ends; results must not change."""
    import labkit.trace.read.reader as reader

    path = DATA / "tracelens-h100-bert-small-inference.pt.trace.json.gz"
    ref = load_trace(path)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 257)
    small = load_trace(path)
    assert small.events.equals(ref.events)
    assert small.stats.n_events == ref.stats.n_events


def test_gunzip_agrees_with_the_gzip_module():
    """The loader's inflater against ``gzip.GzipFile`` on multi-member, padded, cut and damaged
    streams read in odd step sizes: the same bytes, or an error where gzip raises one."""
    import io
    import random
    import zlib

    from labkit.trace.read.streams import Gunzip

    def ours(data, **kw):
        g, out = Gunzip(io.BytesIO(data), **kw), []
        while chunk := g.read():
            out.append(chunk)
        return b"".join(out)

    def outcome(read):
        try:
            return read()
        except (EOFError, zlib.error, gzip.BadGzipFile):
            return "error"

    rng = random.Random(7)
    kinds = Counter()
    for _ in range(240):
        parts = [rng.randbytes(rng.randrange(0, 200)) * rng.randrange(1, 20) for _ in range(rng.randrange(1, 4))]
        data = b"".join(gzip.compress(p, compresslevel=rng.choice([1, 9]), mtime=0) for p in parts)
        mode = rng.choice(["whole", "cut", "trailing", "padded", "padded+member", "flipped"])
        if mode == "cut":
            data = data[:rng.randrange(0, len(data))]
        elif mode == "trailing":
            data += b"\x01" + rng.randbytes(rng.randrange(0, 4))
        elif mode == "padded":
            data += b"\x00" * rng.randrange(1, 4)
        elif mode == "padded+member":
            data += b"\x00" * rng.randrange(1, 4) + gzip.compress(b"next member")
        elif mode == "flipped":
            i = rng.randrange(10, len(data))
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
        kw = {"in_chunk": rng.choice([1, 2, 5, 64, 1 << 20]), "out_max": rng.choice([7, 100, 1 << 20])}
        want = outcome(lambda: gzip.GzipFile(fileobj=io.BytesIO(data)).read())
        assert outcome(lambda: ours(data, **kw)) == want, (mode, kw)
        kinds[want == "error"] += 1
    assert kinds[True] and kinds[False]  # both outcomes were exercised


def _non_ascii_doc(n: int = 400) -> dict:
    """Events whose names, categories and args hold multi-byte UTF-8 (2, 3 and 4 bytes a character)."""
    names = ["kérnel", "ядро", "カーネル", "k😀", "plain"]
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "スレッド"}}]
    for i in range(n):
        events.append({"ph": "X", "cat": "cpu_op" if i % 3 else "kernel", "name": f"{names[i % 5]}#{i}",
                       "pid": 1, "tid": 2, "ts": 10.5 * i, "dur": 3,
                       "args": {"External id": i, "correlation": i, "stream": 7, "note": "ü" * (i % 7),
                                "grid": [i % 4 + 1, 1, 1], "block": [128, 1, 1]}})
    return {"schemaVersion": 1, "displayTimeUnit": "ms", "labkit": {"machine": "prüfstand"}, "traceEvents": events}


@pytest.mark.parametrize("chunk", [None, 64, 257, 4093])
@pytest.mark.parametrize("gz", [False, True])
def test_non_ascii_text_reads_like_the_json_module(tmp_path, monkeypatch, chunk, gz):
    """Multi-byte characters cut by every buffer size: the same tables and metadata as decoding the
    whole document with ``json`` (``trace_from_document``, the per-event rules)."""
    import labkit.trace.read.reader as reader
    from labkit.trace.read.load import trace_from_document

    doc = _non_ascii_doc()
    path = _write(tmp_path, json.dumps(doc, ensure_ascii=False, indent=1), "u.json" + (".gz" if gz else ""), gz=gz)
    if chunk is not None:
        monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(reader, "VALUE_WINDOW", max(chunk // 4, 2))
    tr = load_trace(path)
    ref = trace_from_document(json.loads(json.dumps(doc)))
    assert tr.events.equals(ref.events)
    assert tr.threads.equals(ref.threads)
    assert tr.metadata == {k: v for k, v in doc.items() if k != "traceEvents"}
    assert tr.stats.n_events == len(doc["traceEvents"]) and tr.stats.skipped == 0
    assert tr.stats.bytes_read == len(json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8"))


@pytest.mark.parametrize("where", ["ignored key", "ignored arg", "name", "metadata", "between events"])
def test_bytes_that_are_not_utf8_reject_the_file(tmp_path, monkeypatch, where):
    """Invalid UTF-8 anywhere -- even in a key or argument the loader never keeps -- is not a trace file
    (a small value window, so the batch path, not a look-ahead, meets the bad byte)."""
    import labkit.trace.read.reader as reader

    monkeypatch.setattr(reader, "VALUE_WINDOW", 16)
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
               "unused": "MARK" if where == "ignored key" and i == 150 else "x",
               "args": {"unused": "MARK" if where == "ignored arg" and i == 160 else "x"}} for i in range(300)]
    if where == "name":
        events[200]["name"] = "MARK"
    doc = {"traceEvents": events, "meta": "MARK" if where == "metadata" else "m"}
    text = json.dumps(doc).encode()
    if where == "between events":
        text = text.replace(b'}, {"ph"', b'}, \xff{"ph"', 1)
    else:
        text = text.replace(b"MARK", b"a\xffb")
    p = tmp_path / "bad.json"
    p.write_bytes(text)
    with pytest.raises(UsageError, match="not a UTF-8|expected"):
        load_trace(p)


def test_a_number_cut_by_the_value_window_is_read_whole(tmp_path, monkeypatch):
    import labkit.trace.read.reader as reader

    monkeypatch.setattr(reader, "VALUE_WINDOW", 3)
    p = _write(tmp_path, '{"schemaVersion": 1234567, "ratio": -12.5e3, "traceEvents": [], "last": 98765}')
    tr = load_trace(p)
    assert tr.metadata == {"schemaVersion": 1234567, "ratio": -12.5e3, "last": 98765}


def test_switch_interval_is_restored_after_gzip_loads(tmp_path):
    """Reading a gzip'ed trace lowers the interpreter's switch interval only while it reads: after
    a good file, a corrupt one, and two loads on two threads at once, the caller's value is back."""
    import sys
    import threading

    import labkit.trace.read.reader as reader
    import labkit.trace.read.streams as streams

    good = DATA / "hta-triton-example-a100.pt.trace.json.gz"
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.004)
        seen = []
        real = reader._read_body

        def spy(*a):
            seen.append(sys.getswitchinterval())
            return real(*a)

        reader._read_body = spy
        load_trace(good)
        assert seen and seen[-1] == pytest.approx(streams.PREFETCH_SWITCH_S)
        assert sys.getswitchinterval() == pytest.approx(0.004)
        with pytest.raises(UsageError):
            load_trace(bad)
        assert sys.getswitchinterval() == pytest.approx(0.004)
        threads = [threading.Thread(target=load_trace, args=(good,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sys.getswitchinterval() == pytest.approx(0.004)
    finally:
        reader._read_body = real
        sys.setswitchinterval(before)
