"""Every page of the lab report as a reader first meets it, at 1280 px in headless Chromium: its answer
box within the first 1400 px and above its first figure, with a number in it; no table wider than
its container or the page; no visible "FAIL" outside a closed ``<details>``.

The pages are the lab report that ``test_report_browser`` builds (its ``lab_report`` fixture: quick
size, this machine's CPU, once per test session for both modules).
"""

from __future__ import annotations

import re

import pytest
from test_report_browser import _open, _wait_for_figures, lab_report  # noqa: F401 (the session's report)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

VIEWPORT = {"width": 1280, "height": 900}
ANSWER_WITHIN_PX = 1400

#: in the browser: where the answer and the first figure are, every table's width against its room,
#: and the visible text nodes that say FAIL (none inside a closed <details> counts)
READER_FACTS_JS = r"""
() => {
  const top = el => el.getBoundingClientRect().top + window.scrollY;
  const answer = document.querySelector('.labkit-answer');
  const figure = document.querySelector('.plotly-graph-div');
  const page = document.documentElement.clientWidth;
  const tables = Array.from(document.querySelectorAll('table'))
    .filter(t => t.offsetParent !== null && t.getClientRects().length)
    .map(t => ({width: t.scrollWidth, room: Math.max(t.parentElement.clientWidth, 0), page: page,
                text: t.innerText.slice(0, 80)}));
  const fails = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!/\bFAIL\b/.test(n.nodeValue)) continue;
    const el = n.parentElement;
    if (!el || el.closest('script, style')) continue;
    const closed = el.closest('details:not([open])');
    if (closed && !el.closest('summary')) continue;
    if (!el.getClientRects().length) continue;
    fails.push(n.nodeValue.trim().slice(0, 100));
  }
  return {
    answer_top: answer ? top(answer) : null,
    answer_text: answer ? answer.innerText : '',
    figure_top: figure ? top(figure) : null,
    tables: tables,
    fails: fails,
  };
}
"""


def reader_problems(name: str, facts: dict) -> list[str]:
    """What a page shows its reader wrong, from :data:`READER_FACTS_JS`'s facts (empty: nothing)."""
    out = []
    if facts["answer_top"] is None:
        return [f"{name}: no .labkit-answer element"]
    if facts["answer_top"] > ANSWER_WITHIN_PX:
        out.append(f"{name}: the answer starts at {facts['answer_top']:.0f} px (at most {ANSWER_WITHIN_PX})")
    if facts["figure_top"] is not None and facts["figure_top"] < facts["answer_top"]:
        out.append(f"{name}: a figure ({facts['figure_top']:.0f} px) comes before the answer ({facts['answer_top']:.0f} px)")
    if not re.search(r"\d", facts["answer_text"]):
        out.append(f"{name}: the answer states no number: {facts['answer_text'][:120]!r}")
    for t in facts["tables"]:
        if t["width"] > max(t["room"], t["page"]) + 1:
            out.append(f"{name}: a table {t['width']} px wide in {t['room']} px (page {t['page']} px): {t['text']!r}")
    out += [f"{name}: visible FAIL: {f!r}" for f in facts["fails"]]
    return out


def test_reader_problems_flags_each_fault():
    good = {"answer_top": 300.0, "answer_text": "5.71x faster", "figure_top": 900.0,
            "tables": [{"width": 800, "room": 1000, "page": 1280, "text": "t"}], "fails": []}
    assert reader_problems("p", good) == []
    assert reader_problems("p", {**good, "answer_top": None})
    assert any("starts at" in p for p in reader_problems("p", {**good, "answer_top": 2000.0, "figure_top": 2500.0}))
    assert any("before the answer" in p for p in reader_problems("p", {**good, "figure_top": 100.0}))
    assert any("no number" in p for p in reader_problems("p", {**good, "answer_text": "nothing"}))
    assert any("wide" in p for p in reader_problems("p", {**good, "tables": [{"width": 1500, "room": 1000, "page": 1280,
                                                                              "text": "t"}]}))
    assert any("FAIL" in p for p in reader_problems("p", {**good, "fails": ["FAIL x"]}))


def page_reader_facts(browser, path) -> dict:
    """The facts of one page at 1280 px, once its figures are drawn."""
    page, _ = _open(browser, path)
    try:
        page.set_viewport_size(VIEWPORT)
        _wait_for_figures(page)
        page.wait_for_timeout(300)  # relayout at the new width
        return page.evaluate(READER_FACTS_JS)
    finally:
        page.close()


def test_every_page_opens_with_its_answer_and_reads_at_1280_px(browser, lab_report):  # noqa: F811
    pages = sorted(lab_report.out.glob("[0-9][0-9]_*.html"))
    assert pages, f"no notebook pages exported ({lab_report.proc.stderr[-1500:]})"
    problems = [p for path in pages for p in reader_problems(path.stem, page_reader_facts(browser, path))]
    assert not problems, "\n".join(problems)
