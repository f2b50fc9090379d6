"""A trace read as byte ranges of its event array on worker processes (``jobs``) gives the tables,
statistics and errors of the one-process read, wherever the cuts fall: between events, or inside
strings that hold braces, brackets and ``}, {`` (then the file is read again in order)."""

from __future__ import annotations

import gzip
import json
import mmap
import multiprocessing as mp
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import labkit.trace.read.document as document
from labkit.cli import main as labkit_main
from labkit.errors import UsageError
from labkit.trace.analysis.bench_trace import decompressed_bytes
from labkit.trace.read.columns import ColumnStore
from labkit.trace.read.load import load_trace
from real_traces import fixtures, shared

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def small_parts(monkeypatch):
    """Ranges of a few kB, so hand-made files split (the workers are forked and see the same values)."""
    monkeypatch.setattr(document, "PART_MIN_BYTES", 2000)
    monkeypatch.setattr(document, "_SPLIT_WINDOW", 400)


def _events(n: int, tricky: str) -> list:
    out = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main {x}, [y]"}}]
    for i in range(n):
        out.append({"ph": "X", "cat": "kernel" if i % 3 == 0 else "cpu_op", "name": f"{tricky}#{i % 17}",
                    "pid": 1, "tid": 2 + i % 2, "ts": 10 * i + 0.5 * (i % 2), "dur": 3,
                    "args": {"correlation": i, "stream": 7, "note": tricky, "nested": {"a": [1, {"b": "}, {"}]}}})
        if i % 50 == 7:
            out.append({"ph": "s", "id": i, "pid": 1, "tid": 2, "ts": 10 * i, "cat": "ac2g"})
    return out


def _write(tmp_path: Path, doc, name: str, *, indent=None, gz=False) -> Path:
    text = json.dumps(doc, indent=indent).encode()
    p = tmp_path / name
    p.write_bytes(gzip.compress(text) if gz else text)
    return p


def _on_mapping(a) -> bool:
    """Whether an array's memory is an ``mmap`` (a view's, its owner's)."""
    while isinstance(a, np.ndarray):
        a = a.base
    return isinstance(a.obj if isinstance(a, memoryview) else a, mmap.mmap)


def _noting_transfers(sent: list):
    """``ColumnStore.extend`` noting in ``sent``, for each part merged from a worker, whether its rows are on a
    mapping (left where the worker wrote them) or a copy."""
    extend = ColumnStore.extend

    def noting(self, part, offset, in_place=False):
        if not in_place:
            sent.append(_on_mapping(part[0][0]))
        return extend(self, part, offset, in_place=in_place)
    return noting


def _same(a, b):
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.threads, b.threads)
    assert a.metadata == b.metadata
    sa, sb = vars(a.stats).copy(), vars(b.stats).copy()
    sa.pop("parts"), sb.pop("parts")
    assert sa == sb


@pytest.mark.parametrize("room", ["reserved", "none"])
@pytest.mark.parametrize("tricky", ['}, {', '"},{"ph": "X"}', ']}, {[', "plain"])
def test_cuts_between_events_read_on_workers(tmp_path, small_parts, monkeypatch, tricky, room):
    # one event a line: each cut has a line break in it, so it cannot be inside a string. "none": no room
    # is reserved in front of the last range's rows, so the others' cannot go there and all are copied
    if room == "none":
        monkeypatch.setattr(document, "MIN_EVENT_BYTES", 1 << 40)
    doc = {"schemaVersion": 1, "traceEvents": _events(400, tricky), "displayTimeUnit": "ms"}
    path = _write(tmp_path, doc, "t.json", indent=1)
    sent = []  # per worker's part: did its rows stay on the mapping shared with the parent?
    monkeypatch.setattr(ColumnStore, "extend", _noting_transfers(sent))
    one, three = load_trace(path, jobs=1), load_trace(path, jobs=3)
    assert one.stats.parts == 1 and three.stats.parts == 3
    _same(one, three)
    assert three.events["index"].is_monotonic_increasing and three.stats.n_events == len(doc["traceEvents"])
    # forked workers write where the parent reads; with no room (reserved per byte) they outgrow it and send
    # copies, as spawned ones do (the reader forks only a process with no other thread: not a test worker's)
    forked = "fork" in mp.get_all_start_methods() and threading.active_count() == 1
    assert sent[:2] == ([True, True] if room == "reserved" and forked else [False, False])


def test_forked_workers_rows_stay_where_they_were_written(tmp_path):
    # in a process of its own, with no other thread, as `labkit analyze` runs: the workers are forked
    path = _write(tmp_path, {"traceEvents": _events(400, "plain")}, "t.json", indent=1)
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import labkit.trace.read.document as document
from labkit.trace.read.columns import ColumnStore
from labkit.trace.read.load import load_trace
from test_trace_ranges import _noting_transfers, _same
document.PART_MIN_BYTES, document._SPLIT_WINDOW = 2000, 400
sent = []
ColumnStore.extend = _noting_transfers(sent)
one, three = load_trace({str(path)!r}, jobs=1), load_trace({str(path)!r}, jobs=3)
_same(one, three)
print(three.stats.parts, sent)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["3", "[True,", "True]"]


@pytest.mark.parametrize("tricky", ['}, {' * 40, '}, {"ph": "X", "name": "' * 20, ']}, {[' * 40])
def test_cuts_inside_strings_fall_back_to_one_read(tmp_path, small_parts, tricky):
    # compact JSON on one line: the boundary-like text inside the names is what a cut finds first
    doc = {"traceEvents": _events(300, tricky), "deviceProperties": [{"id": 0, "name": "g"}]}
    path = _write(tmp_path, doc, "t.json")
    one, three = load_trace(path, jobs=1), load_trace(path, jobs=3)
    assert three.stats.parts == 1  # a range ended inside a string: read again in order
    _same(one, three)


def test_gzipped_file_is_read_in_order_at_any_jobs(tmp_path, small_parts):
    doc = {"traceEvents": _events(400, "{gz}"), "schemaVersion": 1}
    plain, packed = _write(tmp_path, doc, "t.json", indent=1), _write(tmp_path, doc, "t.json.gz", indent=1, gz=True)
    assert load_trace(plain, jobs=2).stats.parts == 2  # the same bytes, not gzip'ed, split
    one, two = load_trace(packed, jobs=1), load_trace(packed, jobs=2)
    assert two.stats.parts == 1
    _same(one, two)


def test_malformed_events_in_later_ranges_count_and_fail_alike(tmp_path, small_parts):
    events = _events(400, "x")
    events[350]["dur"] = -1  # in the last range
    events[200]["ts"] = "late"  # in a middle one
    path = _write(tmp_path, {"traceEvents": events}, "t.json", indent=1)
    one, three = load_trace(path, jobs=1, skip_malformed=True), load_trace(path, jobs=3, skip_malformed=True)
    assert three.stats.parts == 3 and [i for i, _ in three.stats.first_skipped] == [200, 350]
    _same(one, three)
    with pytest.raises(UsageError) as e1:
        load_trace(path, jobs=1)
    with pytest.raises(UsageError) as e3:
        load_trace(path, jobs=3)
    assert str(e1.value) == str(e3.value)


def test_truncated_file_gives_the_one_read_error(tmp_path, small_parts):
    text = json.dumps({"traceEvents": _events(300, "t")}, indent=1)
    path = tmp_path / "cut.json"
    path.write_text(text[: int(len(text) * 0.8)])
    with pytest.raises(UsageError) as e1:
        load_trace(path, jobs=1)
    with pytest.raises(UsageError) as e2:
        load_trace(path, jobs=2)
    assert str(e1.value) == str(e2.value)


@pytest.mark.parametrize("path", fixtures() + shared(), ids=lambda p: p.parent.name + "/" + p.name)
def test_analyze_json_is_the_same_for_every_jobs(tmp_path, monkeypatch, path, capsys):
    """Every real trace (the fixtures, and the shared collection where present; inflated: a gzip'ed file is
    read in order) cut into three ranges read on workers: ``labkit analyze``'s JSON is the same, byte for
    byte, at ``--jobs`` 1, 2 and 3."""
    plain = tmp_path / path.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    size = decompressed_bytes(plain)
    monkeypatch.setattr(document, "PART_MIN_BYTES", size // 4)
    monkeypatch.setattr(document, "_SPLIT_WINDOW", min(1 << 16, size // 16))
    assert load_trace(plain, jobs=3).stats.parts == 3
    docs = []
    for jobs in (1, 2, 3):
        out = tmp_path / f"{jobs}.json"
        assert labkit_main(["analyze", str(plain), "--jobs", str(jobs), "--json", str(out)]) == 0
        docs.append(out.read_bytes())
    assert docs[0] == docs[1] == docs[2]
    capsys.readouterr()
