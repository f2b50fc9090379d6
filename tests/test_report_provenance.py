"""Report provenance: which recorded results a kernel read, and how the index shows commits."""

from __future__ import annotations

import json
import subprocess
import sys

from labkit.report.index import commit_label, render_index
from labkit.report.provenance import results_read
from labkit.results import make_result, save_result


def _record(store, machine: str, name: str, commit: str, size: str = "full"):
    result = make_result(name if size == "full" else f"{name}_quick", [{"x": 1}], source="simulated",
                         machine={"slug": machine}, size=size)
    result.labkit_commit = commit
    return save_result(result, store)


def test_audit_hook_lists_every_result_read_once(tmp_path):
    store = tmp_path / "results"
    a = _record(store, "h200", "calibration", "0123456789ab")
    b = _record(store, "cpu-x", "engine", "unknown", size="quick")
    c = _record(store, "cpu-x", "never_read", "0123456789ab")
    (store / "cpu-x" / "notes.json").write_text("{}")  # under the store but not a result
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    log = tmp_path / "reads.txt"
    # audit hooks cannot be removed: install it in a child interpreter
    code = f"""
from pathlib import Path
import json
from labkit.report.provenance import track_result_reads
assert track_result_reads({str(log)!r}, {str(store)!r})
json.loads(Path({str(b)!r}).read_text())
with open({str(a)!r}, "rb") as f: f.read()
json.loads(Path({str(b)!r}).read_text())         # twice: listed once
open({str(store / 'cpu-x' / 'notes.json')!r}).read()
open({str(outside)!r}).read()                   # outside the store: not listed
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert results_read(log) == [
        {"machine": "cpu-x", "name": "engine_quick", "labkit_commit": "unknown", "commit_status": "unknown",
         "size": "quick"},
        {"machine": "h200", "name": "calibration", "labkit_commit": "0123456789ab", "commit_status": "clean",
         "size": "full"},
    ]
    assert c.is_file()
    assert results_read(tmp_path / "missing.txt") == []


def test_without_a_log_path_nothing_is_tracked(monkeypatch):
    from labkit.report.provenance import READS_ENV, track_result_reads

    monkeypatch.delenv(READS_ENV, raising=False)
    assert track_result_reads() is False


def test_commit_labels_flag_unknown_and_dirty():
    assert "commit unknown" in commit_label("unknown") and "commit unknown" in commit_label(None)
    dirty = commit_label("0123456789ab+dirty")
    assert "0123456789ab+dirty" in dirty and "uncommitted changes" in dirty
    clean = commit_label("0123456789ab")
    assert "0123456789ab" in clean and "uncommitted" not in clean and "unknown" not in clean


def test_index_shows_where_each_notebook_ran_and_its_results_commits():
    meta = {
        "created": "2026-01-01T00:00:00+00:00", "labkit_commit": "fedcba987654", "size": "full", "device": "cuda",
        "machine": {"slug": "h200"},
        "notebooks": [
            {"name": "00_a", "title": "A", "html": "00_a.html", "ok": True, "seconds": 1.0, "sources": [],
             "machine": "h200", "device": "cuda", "labkit_commit": "fedcba987654", "created": "2026-01-01T00:00:00",
             "results": [
                 {"machine": "h200", "name": "calibration", "labkit_commit": "unknown"},
                 {"machine": "h200", "name": "engine", "labkit_commit": "111111111111+dirty"},
                 {"machine": "a100", "name": "engine", "labkit_commit": "unknown"},
             ]},
            {"name": "01_b", "title": "B", "html": "01_b.html", "ok": True, "seconds": 1.0, "sources": [],
             "machine": "cpu-x", "device": "cpu", "labkit_commit": "fedcba987654+dirty", "results": []},
            # an entry from before the lab recorded any of this
            {"name": "02_c", "title": "C", "html": "02_c.html", "ok": True, "seconds": 1.0, "sources": []},
        ],
    }
    page = render_index(meta)

    def row(name):
        start = page.index(f'data-notebook="{name}"')
        return page[start:page.index("</tr>", start)]

    a, b, c = row("00_a"), row("01_b"), row("02_c")
    assert "<b>cuda</b> on <code>h200</code>" in a
    unknown = a[a.index("commit unknown"):]
    assert unknown.index("h200/calibration") < unknown.index("a100/engine")  # grouped under one commit
    assert "111111111111+dirty" in a and "uncommitted changes" in a and "h200/engine" in a
    assert "<b>cpu</b> on <code>cpu-x</code>" in b and "uncommitted changes" in b and "none read" in b
    assert c.count("not recorded") == 2
    assert json.dumps(meta)  # the manifest stays plain JSON
