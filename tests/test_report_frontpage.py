"""The index as a front page: the findings table from the recorded results, "Start here", and one
written sentence per notebook."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from findings_results import write_results
from labkit.report.findings import lab_findings
from labkit.report.frontpage import APPENDICES, FIRST_PAGES, NOTEBOOK_SUMMARIES, ONE_MINUTE
from labkit.report.index import SUMMARY_CHARS, notebook_summary, render_index

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py"))


def _meta(notebooks=("00_environment", "01_placeholder_scheduler"), findings=None) -> dict:
    meta = {"created": "2026-12-01T00:00:00+00:00", "labkit_commit": "0123456789ab", "size": "quick",
            "device": "cpu", "machine": {"slug": "cpu-x"},
            "notebooks": [{"name": n, "title": f"{n[:2]} · T{n[:2]}", "html": f"{n}.html", "ok": True,
                           "seconds": 1.0, "sources": [], "results": []} for n in notebooks]}
    if findings is not None:
        meta["findings"] = findings
    return meta


def _table(page: str, table_id: str) -> str:
    start = page.index(f'<table id="{table_id}">')
    return page[start:page.index("</table>", start)]


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment))).strip()


def test_the_answer_and_its_evidence_above_the_notebooks(tmp_path):
    write_results(tmp_path)
    found = lab_findings(tmp_path)
    page = render_index(_meta(findings=found))
    table = _table(page, "findings")
    rows = re.findall(r'<tr data-finding="([^"]+)">(.*?)</tr>', table)
    assert [k for k, _ in rows] == ["unit_cost", "engine_saving", "server_ab", "peaks", "whole_run"]
    assert page.index('id="answer"') < page.index('id="findings"') < page.index('id="start"') < page.index('id="notebooks"')
    assert html.escape(found["answer"]) in page
    cells = dict(rows)
    assert "2.00x" in _text(cells["server_ab"]) and 'data-source="measured-cpu"' in cells["server_ab"]
    # a page of this report is linked; one it does not hold is named, not linked
    assert 'href="00_environment.html"' in cells["unit_cost"]
    assert "href=" not in cells["peaks"].split('class="page"')[1]
    assert "http" not in page


def test_without_findings_in_the_manifest_the_index_reads_the_results_store(results_store):
    page = render_index(_meta())
    assert "No answer recorded" in page and page.count("not recorded: ") == 5  # each row says why
    write_results(results_store)
    page = render_index(_meta())
    assert "No answer recorded" not in page and "not recorded: " not in page


def test_every_notebook_has_a_written_sentence_shown_whole():
    assert sorted(NOTEBOOK_SUMMARIES) == NOTEBOOKS
    page = render_index(_meta(NOTEBOOKS, findings={"answer": None, "why_no_answer": "none", "evidence": []}))
    for name in NOTEBOOKS:
        sentence = NOTEBOOK_SUMMARIES[name]
        assert sentence.endswith(".") and not sentence.endswith("..") and "…" not in sentence, name
        assert sentence[0].isupper() or sentence[0] in "#(", name
        assert len(sentence) <= SUMMARY_CHARS + 10, f"{name}: {len(sentence)} characters, more than a line"
        if name in APPENDICES:  # linked from the footer, not a row
            continue
        row = page[page.index(f'data-notebook="{name}"'):]
        row = row[:row.index("</tr>")]
        assert html.escape(sentence) in row, name  # whole, not cut
        import nbformat  # noqa: F401  (read_notebook needs it)
        from labkit.report.build import read_notebook

        own = notebook_summary(read_notebook(REPO / "notebooks" / f"{name}.py"))
        assert sentence != own, f"{name}: the sentence is the notebook's own first one"


def test_a_notebook_without_a_written_sentence_gets_its_own_cut_to_a_line():
    meta = _meta(findings=[])
    long = "Shows " + "a very long thing " * 10 + "in the end."
    meta["notebooks"].append({"name": "99_new", "title": "99 · New", "html": "99_new.html", "ok": True,
                              "seconds": 1.0, "summary": long})
    row = render_index(meta)
    row = row[row.index('data-notebook="99_new"'):]
    assert "…" in row[:row.index("</tr>")]


def test_start_here_names_pages_that_exist_and_commands_the_lab_has():
    from labkit.cli import BENCH_TARGETS, VERBS

    page = render_index(_meta(NOTEBOOKS, findings={"answer": None, "why_no_answer": "none", "evidence": []}))
    start = page[page.index('<section id="start">'):page.index("</section>", page.index('id="start"'))]
    for name, _, _ in FIRST_PAGES:
        assert name in NOTEBOOKS and f'href="{name}.html"' in start
    assert _text(start).startswith(f"Start here Open {FIRST_PAGES[0][0][:2]} · T{FIRST_PAGES[0][0][:2]} :")
    for command, what, took in ONE_MINUTE:
        words = command.split()
        assert words[0] == "labkit" and (words[1] in VERBS or (words[1] == "bench" and words[2] in BENCH_TARGETS))
        for word in words[2:]:
            if "/" in word:
                assert (REPO / word).is_file(), word  # the trace it reads ships with the lab
        assert re.fullmatch(r"about \d+ s", took) and f"<code>{html.escape(command)}</code>" in start


def test_the_one_minute_trace_is_analysed_on_this_cpu(capsys):
    from labkit.cli import main

    command = next(c for c, _, _ in ONE_MINUTE if c.split()[1] == "analyze")
    assert main(command.split()[1:]) == 0
    out = capsys.readouterr().out
    assert "host call sites during host-wait idle" in out and "schedule" in out


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_each_written_sentence_is_one_sentence(name):
    body = NOTEBOOK_SUMMARIES[name][:-1]
    assert not re.search(r"[.!?]\s+[A-Z]", body), f"{name}: more than one sentence"


def test_the_readme_notebook_table_says_what_the_index_says():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| \d\d \| \[[^\]]+\]\(notebooks/([^)]+)\.py\) \| (.+?) \|$", text, re.M))
    assert rows == NOTEBOOK_SUMMARIES


def test_an_appendix_is_linked_from_the_footer_not_listed_among_the_notebooks():
    meta = _meta(("05_trace_analysis", "06_compare_gpus"), findings=[])
    meta["notebooks"][1]["title"] = "06 · Appendix: T06"
    page = render_index(meta)
    rows = _table(page, "notebooks")
    assert 'data-notebook="05_trace_analysis"' in rows and "06_compare_gpus" not in rows
    footer = page[page.index('<footer id="appendix">'):]
    assert _text(footer).startswith("Appendix: T06 .") and '<a href="06_compare_gpus.html">T06</a>' in footer
    meta["notebooks"][1]["ok"] = False
    assert "failed" in _text(render_index(meta)[page.index('<footer id="appendix">'):])
    assert "Appendix" not in render_index(_meta(findings=[]))  # no appendix in this report: no link
