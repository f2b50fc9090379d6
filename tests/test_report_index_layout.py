"""The report index reads at a glance: in Chromium at 1280 px every notebook row is at most about
three lines tall, the findings table above it fits the page, and nothing is clipped or pushed out of
its cell.

The index is rendered from a manifest as ``labkit report`` writes it for the lab's own notebooks:
their real titles and summary lines, every recorded result under ``data/results`` read by the
notebooks that read that kind of result (notebook 06 reads them all, as it does), one failed
notebook with a long error, all four sources on the last rows, in several orders, and the findings of the committed results
with the serving simulator's row added (hand-made, as it would read). A full-page screenshot is kept under
pytest's tmp path (its path is printed and recorded as the test's ``screenshot`` property).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from report_helpers import tracked_results

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
WIDTH = 1280
#: result-name prefixes each notebook reads (06 compares every result)
READS = {"00": ["calibration"], "01": ["mm_", "calibration"], "02": ["engine", "calibration"],
         "03": ["h2d", "ranges"], "04": ["attn"], "05": ["trace", "engine"], "06": [""],
         "07": ["vllm", "ranges"], "08": ["vllm", "pr_table"]}
SOURCES = ["measured-gpu", "measured-cpu", "simulated", "interpreted"]
#: every source on one row, in the orders that pack worst (long badges side by side)
ALL_FOUR = [["interpreted", "measured-cpu", "measured-gpu", "simulated"],
            ["measured-cpu", "measured-gpu", "interpreted", "simulated"],
            ["simulated", "interpreted", "measured-cpu", "measured-gpu"]]

_ROWS_JS = """
() => Array.from(document.querySelectorAll('tr[data-notebook]')).map(tr => {
  const lh = parseFloat(getComputedStyle(tr.querySelector('td.nb')).lineHeight);
  const cells = Array.from(tr.children);
  const outside = [];
  for (const td of cells) {
    const box = td.getBoundingClientRect();
    if (td.scrollWidth > td.clientWidth + 1) outside.push(td.className + ': content wider than its cell');
    for (const el of td.querySelectorAll('*')) {
      for (const r of el.getClientRects()) {
        if (r.width && (r.left < box.left - 1 || r.right > box.right + 1))
          outside.push(td.className + ' ' + el.tagName + '.' + el.className + ': outside its cell');
      }
    }
  }
  const num = tr.querySelector('td.num code');
  const badges = Array.from(tr.querySelectorAll('.badge'));
  return {
    name: tr.dataset.notebook, height: tr.getBoundingClientRect().height, lineHeight: lh,
    numberLines: num.getClientRects().length, titleLines: tr.querySelector('.title').getClientRects().length,
    badgeLines: badges.map(b => b.getClientRects().length), outside,
  };
})
"""


_FINDINGS_JS = """
() => Array.from(document.querySelectorAll('#findings tr[data-finding]')).map(tr => {
  const outside = [];
  for (const td of tr.children) {
    const box = td.getBoundingClientRect();
    if (td.scrollWidth > td.clientWidth + 1) outside.push(td.className + ': content wider than its cell');
    for (const el of td.querySelectorAll('*')) {
      for (const r of el.getClientRects()) {
        if (r.width && (r.left < box.left - 1 || r.right > box.right + 1))
          outside.push(td.className + ' ' + el.tagName + ': outside its cell');
      }
    }
  }
  const lh = parseFloat(getComputedStyle(tr.querySelector('td.method')).lineHeight);
  return {key: tr.dataset.finding, height: tr.getBoundingClientRect().height, lineHeight: lh,
          right: document.getElementById('findings').getBoundingClientRect().right, outside};
})
"""


def _manifest() -> dict:
    from labkit.report.build import find_notebooks, notebook_title, read_notebook
    from labkit.report.index import notebook_summary
    from labkit.results import commit_status

    recorded = [{"machine": r.slug, "name": r.name, "labkit_commit": r.labkit_commit,
                 "commit_status": commit_status(r.labkit_commit), "size": r.size}
                for r in tracked_results(REPO / "data" / "results")]  # a checkout's own quick runs left out
    untraceable = next((r for r in recorded if r["commit_status"] == "unknown"),
                       {"machine": "h200", "name": "calibration_quick", "labkit_commit": None,
                        "commit_status": "unknown", "size": "quick"})
    notebooks = []
    for i, path in enumerate(find_notebooks(REPO / "notebooks")):
        nb = read_notebook(path)
        num = path.stem[:2]
        entry = {
            "name": path.stem, "title": notebook_title(nb, path.stem), "summary": notebook_summary(nb),
            "html": f"{path.stem}.html", "ok": True, "seconds": 1234.5 if i == 1 else 12.0 * (i + 1),
            "sources": ALL_FOUR[(i - 5) % len(ALL_FOUR)] if i >= 5 else SOURCES[i % 3:i % 3 + 2], "error": None,
            "machine": "cpu-epyc-2c", "device": "cpu", "labkit_commit": "0123456789ab+dirty",
            "created": "2026-12-01T21:00:00+00:00",
            "results": [r for r in recorded if any(r["name"].startswith(k) for k in READS.get(num, [""]))],
        }
        if i == 2:
            entry.update(ok=False, error={
                "cell": 14, "first_line": "analysis = analyze_trace(path, steps=r'ProfilerStep#\\d+', jobs=4)",
                "error": "FileNotFoundError: [Errno 2] No such file or directory: "
                         "'../data/traces/h200/per_layer/rank0.pt.trace.json.gz'"})
        if i == 3:
            entry.update(labkit_commit="fedcba987654", machine="rtx-4090", device="cuda")
        if not any(r["commit_status"] == "unknown" for r in entry["results"]):
            entry["results"].append(untraceable)  # a flag every page carries: said once in the provenance
        notebooks.append(entry)
    return {"created": "2026-12-01T21:30:00+00:00", "labkit_commit": "0123456789ab+dirty", "size": "quick",
            "device": "cpu", "machine": {"slug": "cpu-epyc-2c", "device": "cpu"}, "notebooks": notebooks,
            "findings": _findings()}


def _findings() -> dict:
    from labkit.report.findings import lab_findings

    return lab_findings(REPO / "data" / "results")


@pytest.fixture(scope="module")
def index_page(tmp_path_factory) -> Path:
    from labkit.report.index import render_index

    path = tmp_path_factory.mktemp("index") / "index.html"
    path.write_text(render_index(_manifest()), encoding="utf-8")
    return path


def test_every_row_is_at_most_three_lines_and_nothing_is_clipped(browser, index_page, tmp_path, record_property):
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    try:
        page.goto(index_page.as_uri(), wait_until="load")
        rows = page.evaluate(_ROWS_JS)
        page_width = page.evaluate("() => document.documentElement.scrollWidth")
        flag_lines = page.evaluate("() => { const p = document.getElementById('flags');"
                                   " return p ? p.getBoundingClientRect().height / parseFloat(getComputedStyle(p).lineHeight) : 0; }")
        shot = tmp_path / f"index-{WIDTH}px.png"
        page.screenshot(path=str(shot), full_page=True)
    finally:
        page.close()
    record_property("screenshot", str(shot))
    tallest = max(rows, key=lambda r: r["height"])
    print(f"index screenshot: {shot}; tallest row {tallest['name']}: {tallest['height']:.0f} px, "
          f"line height {tallest['lineHeight']:.1f} px")
    from labkit.report.frontpage import APPENDICES

    assert len(rows) == len([p for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py") if p.stem not in APPENDICES])
    assert page_width <= WIDTH, "the index scrolls sideways"
    for r in rows:
        lines = (r["height"] - 9) / r["lineHeight"]  # 2 x 4 px padding and the border
        assert lines <= 3.5, f"{r['name']}: row {r['height']:.0f} px = {lines:.1f} lines"
        assert r["numberLines"] == 1 and r["titleLines"] <= 2, r
        assert all(n == 1 for n in r["badgeLines"]), f"{r['name']}: a badge broke across lines"
        assert r["outside"] == [], f"{r['name']}: {r['outside'][:5]}"
    assert 0 < flag_lines <= 1.5  # the provenance, folded to its one line


def test_results_open_without_javascript(browser, index_page):
    context = browser.new_context(java_script_enabled=False, viewport={"width": WIDTH, "height": 900})
    page = context.new_page()
    try:
        page.goto(index_page.as_uri(), wait_until="load")
        listing = page.locator("#flags ul")
        assert not listing.is_visible()
        page.locator("#flags summary").click()
        assert listing.is_visible()
        assert listing.locator('li[data-notebook^="05_"]').count() == 1
        failed = page.locator("td.st details").first
        failed.locator("summary").click()
        assert "FileNotFoundError" in failed.inner_text()
    finally:
        context.close()


def test_the_findings_table_fits_at_1280_px(browser, index_page):
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    try:
        page.goto(index_page.as_uri(), wait_until="load")
        rows = page.evaluate(_FINDINGS_JS)
        page_width = page.evaluate("() => document.documentElement.scrollWidth")
    finally:
        page.close()
    assert [r["key"] for r in rows] == ["unit_cost", "engine_saving", "server_ab", "peaks", "whole_run"]
    assert page_width <= WIDTH, "the index scrolls sideways"
    for r in rows:
        assert r["outside"] == [], f"{r['key']}: {r['outside'][:5]}"
        assert r["right"] <= WIDTH
        assert r["height"] <= 90, f"{r['key']}: {r['height']:.0f} px tall"
