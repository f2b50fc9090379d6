"""Report provenance: which recorded results a kernel read, and how the index shows commits."""

from __future__ import annotations

import copy
import html
import re
import subprocess
import sys

from labkit.report.index import commit_label, notebook_summary, render_index, shorten_words
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
    timed = make_result("mm_decode_step", [{"x": 1}], source="measured-cpu", machine={"slug": "cpu-x"}, size="full")
    timed.labkit_commit = "0123456789ab"
    e = save_result(timed, store)  # a CPU timing whose run kept no unit costs
    (store / "cpu-x" / "notes.json").write_text("{}")  # under the store but not a result
    (store / "cpu-x" / "cut_short.json").write_text('{"name": "eng')  # a result that does not load
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
json.loads(Path({str(e)!r}).read_text())
open({str(store / 'cpu-x' / 'notes.json')!r}).read()
open({str(store / 'cpu-x' / 'cut_short.json')!r}).read()
open({str(outside)!r}).read()                   # outside the store: not listed
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    records, unreadable = results_read(log)
    assert unreadable == ["cpu-x/cut_short.json"]
    assert records == [
        {"machine": "cpu-x", "name": "engine_quick", "labkit_commit": "unknown", "commit_status": "unknown",
         "size": "quick"},
        {"machine": "h200", "name": "calibration", "labkit_commit": "0123456789ab", "commit_status": "clean",
         "size": "full"},
        {"machine": "cpu-x", "name": "mm_decode_step", "labkit_commit": "0123456789ab", "commit_status": "clean",
         "size": "full", "unit_costs": False},
    ]
    assert c.is_file()
    assert results_read(tmp_path / "missing.txt") == ([], [])


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


def _text(fragment: str) -> str:
    """The words of an HTML fragment (tags dropped, line breaks and list items as spaces)."""
    spaced = re.sub(r"<(br|li)\b[^>]*>", " ", fragment)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", spaced))).strip()


def _index_meta() -> dict:
    return {
        "created": "2026-01-01T00:00:00+00:00", "labkit_commit": "fedcba987654", "size": "full", "device": "cuda",
        "machine": {"slug": "h200"},
        "notebooks": [
            {"name": "00_a", "title": "00 · A", "html": "00_a.html", "ok": True, "seconds": 1.0, "sources": [],
             "machine": "h200", "device": "cuda", "labkit_commit": "fedcba987654", "created": "2026-01-01T00:00:00",
             "results": [
                 {"machine": "h200", "name": "calibration", "labkit_commit": "unknown"},
                 {"machine": "h200", "name": "engine", "labkit_commit": "111111111111+dirty"},
                 {"machine": "a100", "name": "engine", "labkit_commit": "unknown"},
             ]},
            {"name": "01_b", "title": "B", "html": "01_b.html", "ok": True, "seconds": 1.0, "sources": [],
             "machine": "cpu-x", "device": "cpu", "labkit_commit": "fedcba987654+dirty",
             "results": [{"machine": "a100", "name": "engine", "labkit_commit": "unknown"}]},
            {"name": "02_c", "title": "C", "html": "02_c.html", "ok": True, "seconds": 1.0, "sources": [],
             "machine": "cpu-x", "device": "cpu", "labkit_commit": "fedcba987654", "results": []},
            # an entry from before the lab recorded any of this
            {"name": "03_d", "title": "D", "html": "03_d.html", "ok": True, "seconds": 1.0, "sources": []},
        ],
    }


def _provenance(page: str) -> str:
    start = page.index('<details id="flags"')
    return page[start:page.index("</details>", start)]


def test_index_folds_the_results_each_page_read_and_says_flags_once_with_why():
    meta = _index_meta()
    before = copy.deepcopy(meta)
    page = render_index(meta)

    def row(name):
        start = page.index(f'data-notebook="{name}"', page.index('<table id="notebooks"'))
        return page[start:page.index("</tr>", start)]

    a, b, c, d = row("00_a"), row("01_b"), row("02_c"), row("03_d")
    fold = _provenance(page)
    assert page.count('id="flags"') == 1 and page.index('id="flags"') < page.index('<table id="notebooks"')
    # one folded line: how many results, how many kinds of flag
    assert _text(fold[:fold.index("</summary>")]) == ("Provenance: 3 recorded results read by the pages, "
                                                      "by labkit commit (2 kinds of flag)")
    # every flagged result is said once, each file once, with why it is flagged
    flags = _text(fold[fold.index("<p>"):fold.index("</p>")])
    assert flags.startswith("Commit unknown: 2 recorded results (h200/calibration, a100/engine): no labkit commit")
    assert "recorded before results carried their commit" in flags and "LABKIT_COMMIT" in flags
    assert "Uncommitted: 1 recorded result (h200/engine): made from a tree with uncommitted changes" in flags
    assert "ran with" not in flags  # 00_a and 02_c ran on a clean commit
    # per page that read results, its files grouped by commit; the rows list none of them
    items = {m.group(1): _text(m.group(2)) for m in re.finditer(r'<li data-notebook="([^"]+)">(.*?)</li>', fold)}
    assert items == {"00_a": "00 commit unknown: h200/calibration, a100/engine; 111111111111+dirty uncommitted "
                             "changes: h200/engine",
                     "01_b": "01 commit unknown: a100/engine"}
    assert not any("calibration" in r or "a100" in r for r in (a, b, c, d))
    # where each ran; a commit other than the report's is shown (and flagged)
    assert _text(a[a.index('class="ran"'):a.index("</td>", a.index('class="ran"'))]).endswith("cuda on h200")
    ran_b = _text(b[b.index('class="ran"'):b.index("</td>", b.index('class="ran"'))])
    assert ran_b.endswith("cpu on cpu-x fedcba9 uncommitted") and 'title="fedcba987654+dirty"' in b
    assert "data-commit" not in c  # 02_c ran on the report's commit: not repeated
    assert d.count("not recorded") == 1
    assert meta == before  # the manifest (written as report.json) is left as it was


def test_shared_run_flag_is_said_once_and_left_off_the_rows():
    meta = _index_meta()
    for nb in meta["notebooks"][:3]:
        nb["labkit_commit"] = "fedcba987654+dirty"
    meta["labkit_commit"] = "fedcba987654+dirty"
    page = render_index(meta)
    assert "ran with uncommitted changes to labkit (fedcba987654+dirty)" in _text(_provenance(page))
    ran = re.findall(r'<td class="ran">(.*?)</td>', page)
    assert len(ran) == 4 and not [cell for cell in ran if "data-commit" in cell or "uncommitted" in cell]


def test_no_flag_when_every_result_is_clean_and_no_fold_when_none_was_read():
    meta = _index_meta()
    for nb in meta["notebooks"]:
        for r in nb.get("results", []):
            r["labkit_commit"] = "0123456789ab"
    page = render_index(meta)
    assert "data-flag=" not in page and "kind" not in _text(_provenance(page)[:_provenance(page).index("</summary>")])
    for nb in meta["notebooks"]:
        nb["results"] = []
        nb["labkit_commit"] = "fedcba987654"
    assert 'id="flags"' not in render_index(meta)


def test_summary_line_of_a_notebook():
    import nbformat

    def nb(text):
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text), nbformat.v4.new_code_cell("1")])

    opening = ("# 09 · Title\n\nSome context with a [link](http://x) and **bold** words. More context.\n\n"
               "This page shows `the thing`: in two figures. Then more.")
    assert notebook_summary(nb(opening)) == "Shows the thing: in two figures."
    assert notebook_summary(nb("# T\n\nFirst words here. Second sentence.")) == "First words here."
    assert notebook_summary(nb("# Only a heading")) == ""
    assert shorten_words("one two three four", 12) == "one two…"
    assert shorten_words("short", 12) == "short"
