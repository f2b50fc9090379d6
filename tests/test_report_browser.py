"""Exported report pages in headless Chromium: offline, figures drawn, toggles work, widgets a line.

Two builds: a small one from notebooks written here (a plotly figure with buttons, one with
a dropdown, an ipywidgets slider), and the lab's real report (``labkit report --size quick``
over ``notebooks/``, run on this machine's CPU into a temporary folder, with a secret
planted in the environment that must not appear on any page). The real report weighs at most
10 MB (plotly.js written once), and one page exported alone (``--single``) opens offline, away
from the report's folder, with every figure drawn. Each real page is also held to what it must
show (``report_pages.PAGES``: headings, figures with data, key numbers of the recorded results it
read); two pages built against a store whose results do not load show that this check fails on
such pages. How each page reads (answer and evidence, length, folded code, Try it live):
``test_report_answers_browser``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from report_helpers import TOGGLE_CELLS, tracked_results, write_notebook
from report_pages import (PAGE_CHECK_FACTS_JS, PAGE_FACTS_JS, PAGES, READER_FACTS_JS, Recorded, drive_control,
                          page_problems, shown_data)

from labkit.report.build import build_report
from labkit.results import load_results

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]

# For each figure with update menus: the buttons that set "visible", and what is visible now.
_MENUS_JS = """
() => Array.from(document.querySelectorAll('.plotly-graph-div')).map((gd, gi) => {
  const menus = (gd.layout && gd.layout.updatemenus) || [];
  return {
    graph: gi,
    visible: (gd._fullData || []).map(t => t.visible === true),
    menus: menus.map((m, mi) => ({
      menu: mi, type: m.type || 'dropdown',
      buttons: (m.buttons || []).map(b => {
        const a = (b.args && b.args[0]) || {};
        return Array.isArray(a.visible) ? a.visible.map(v => v === true) : null;
      }),
    })),
  };
})
"""


def _record_requests(page) -> list[str]:
    """The list every later request of ``page`` that failed or left file:// is added to."""
    bad: list[str] = []
    page.on("requestfailed", lambda r: bad.append(f"failed: {r.url[:120]} ({r.failure})"))
    page.on("request", lambda r: None if r.url.startswith(("file://", "data:", "blob:", "about:"))
            else bad.append(f"external: {r.url[:120]}"))
    return bad


def _goto(page, path: Path) -> None:
    page.goto(path.resolve().as_uri(), wait_until="load")
    page.wait_for_load_state("networkidle")


def _open(browser, path: Path):
    """Open a page from disk in a new tab, recording every request that failed or left file://."""
    page = browser.new_page()
    bad = _record_requests(page)
    _goto(page, path)
    return page, bad


def _wait_for_figures(page) -> int:
    """Wait until every plotly figure of the page is drawn; returns how many there are."""
    n_graphs = page.locator(".plotly-graph-div").count()
    if n_graphs:
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
            ".every(g => g.querySelector('.main-svg'))", timeout=30_000)
    return n_graphs


#: the window every page is read in
VIEWPORT = {"width": 1280, "height": 900}


def _visits(browser, paths) -> dict:
    """Per page (by its name), :func:`_visit`'s facts, the pages visited in turn in one tab as a reader
    goes from page to page (the tab's renderer then compiles plotly.js once, not once per page)."""
    page = browser.new_page(viewport=VIEWPORT)
    bad = _record_requests(page)
    try:
        return {p.stem: _visit(page, bad, p) for p in paths}
    finally:
        page.close()


def _visit(page, bad: list, path: Path) -> dict:
    """One visit to a page at 1280 px, once its figures are drawn: what the checks of this module and of
    ``test_report_answers_browser`` read (``reader``: READER_FACTS_JS, ``checks``: PAGE_CHECK_FACTS_JS with
    what driving its "Try it live" figure did, ``content``: PAGE_FACTS_JS), then every update menu
    clicked (``toggled``, ``toggle_problems``), the text after that and the requests that failed or left
    file:// (``bad``, the tab's list, emptied first)."""
    bad.clear()
    _goto(page, path)
    n_graphs = _wait_for_figures(page)
    facts = {"graphs": n_graphs, "reader": page.evaluate(READER_FACTS_JS),
             "checks": page.evaluate(PAGE_CHECK_FACTS_JS), "content": page.evaluate(PAGE_FACTS_JS),
             "live_notes": page.locator(".labkit-live-note").count()}
    checks = facts["checks"]
    if checks["live_figure"] >= 0:
        before = shown_data(page, checks["live_figure"])
        checks["live_control"] = drive_control(page, checks["live_figure"])
        checks["live_changed"] = shown_data(page, checks["live_figure"]) != before
    facts["toggled"], facts["toggle_problems"] = _click_toggles(page, path.name)
    facts["text"] = page.inner_text("body")
    facts["outputs"] = page.evaluate("() => Array.from(document.querySelectorAll('.jp-OutputArea-output'))"
                                     ".map(o => o.textContent)")
    facts["bad"] = list(bad)
    return facts


def _render_problems(path: Path, visit: dict) -> list[str]:
    """What a visited page fails of rendering offline: a widget's state in the file, a traceback on the
    page, a request that failed or left file://, an update menu that changed nothing."""
    problems = list(visit["toggle_problems"])
    if "application/vnd.jupyter.widget" in path.read_text(encoding="utf-8"):
        problems.append(f"{path.name}: a widget's view or state on the page")
    if "Traceback (most recent call last)" in visit["text"]:
        problems.append(f"{path.name}: Python traceback on the page")
    problems += [f"{path.name}: a cell printed {line.strip()[:160]!r}" for out in visit.get("outputs", [])
                 for line in out.splitlines() if _FAILURE.search(line)]
    if visit["bad"]:
        problems.append(f"{path.name}: {visit['bad']}")
    return problems


#: a line a cell prints that says something failed ("x failed: why", "FAILED", "SomeError: ...")
_FAILURE = re.compile(r"\bfailed:|\bFAILED\b|\b[A-Z][A-Za-z]*Error\b")


def test_a_printed_failure_is_a_render_problem(tmp_path):
    path = tmp_path / "p.html"
    path.write_text("<p>x</p>", encoding="utf-8")
    visit = {"toggle_problems": [], "text": "", "bad": [], "outputs": ["ok\nmax_abs_err 1e-7, none failed"]}
    assert _render_problems(path, visit) == []
    for line in ("triton_prefix on tiny failed: InterpreterError: x", "FAILED: triton_prefix", "KeyError: 'x'"):
        assert _render_problems(path, dict(visit, outputs=["ok", line])), line


def _click_toggles(page, name: str) -> tuple[int, list[str]]:
    """Click, per menu, a button that changes trace visibility; check the change. Returns the clicks and
    what did not change as its button says."""
    clicks, problems = 0, []
    for fig in page.evaluate(_MENUS_JS):
        for menu in fig["menus"]:
            current = page.evaluate(_MENUS_JS)[fig["graph"]]["visible"]
            target = next(((i, v) for i, v in enumerate(menu["buttons"]) if v is not None and v != current), None)
            if target is None:
                continue
            i, want = target
            gd = page.locator(".plotly-graph-div").nth(fig["graph"])
            gd.scroll_into_view_if_needed()
            container = gd.locator("g.updatemenu-container").nth(menu["menu"])
            if menu["type"] == "dropdown":
                container.locator("g.updatemenu-header").click()
                container.locator("g.updatemenu-dropdown-button").nth(i).click()
            else:
                container.locator("g.updatemenu-button").nth(i).click()
            page.wait_for_timeout(200)
            after = page.evaluate(_MENUS_JS)[fig["graph"]]["visible"]
            if after != want:
                problems.append(f"{name}: graph {fig['graph']} menu {menu['menu']} button {i}: {after} != {want}")
            clicks += 1
    return clicks, problems


def _once_per_run(tmp_path_factory, name: str, make) -> dict:
    """``make()``'s JSON, made once per test run: the first pytest-xdist worker to ask makes it under a
    lock in the run's folder, the others read it."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's folder
    with FileLock(str(shared / f"{name}.lock")):
        done = shared / f"{name}.json"
        if not done.is_file():
            done.write_text(json.dumps(make()), encoding="utf-8")
        return json.loads(done.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def small_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("small_report")
    nbdir = root / "nbs"
    nbdir.mkdir()
    write_notebook(nbdir, "00_toggles", "Toggles and widgets", TOGGLE_CELLS)
    old = os.environ.get("LABKIT_RESULTS")
    os.environ["LABKIT_RESULTS"] = str(root / "results")
    try:
        runs = build_report(root / "out", device="cpu", notebooks_dir=nbdir, log=lambda m: None)
    finally:
        if old is None:
            os.environ.pop("LABKIT_RESULTS", None)
        else:
            os.environ["LABKIT_RESULTS"] = old
    assert all(r.ok for r in runs), [r.error for r in runs]
    return root / "out"


def test_small_report_renders_offline_with_toggles_and_its_widget_as_a_line(browser, small_report):
    path = small_report / "00_toggles.html"
    visit = _visits(browser, [path])[path.stem]
    assert not _render_problems(path, visit)
    assert visit["graphs"] == 2 and visit["toggled"] == 2
    assert visit["live_notes"] == 1


def test_index_page_offline_and_links(browser, small_report):
    page, bad = _open(browser, small_report / "index.html")
    try:
        assert page.locator("a[href='00_toggles.html']").count() == 1
        assert page.locator("span[data-source='measured-cpu']").count() >= 1
        assert not bad
    finally:
        page.close()


@dataclass
class LabReport:
    out: Path  # the pages
    secret: str  # planted in the environment; must appear nowhere
    proc: subprocess.CompletedProcess
    recorded: list  # the recorded results in the store before the build (what the pages read)


def _run_report(out: Path, results: Path, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    # notebook 08's live census runs only where vLLM's CPU environment is named: never in these tests
    env = dict(os.environ, LABKIT_RESULTS=str(results), LABKIT_VLLM_CPU_VENV=str(out / "no-vllm-cpu-venv"),
               **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "labkit", "report", "--size", "quick", "--device", "cpu", "--out", str(out), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
    )


@pytest.fixture(scope="session")
def lab_report(tmp_path_factory) -> LabReport:
    """The lab's own report, built on this machine's CPU with a planted secret, once per test run."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "lab_report"

    def build() -> dict:
        shutil.rmtree(root, ignore_errors=True)
        results = root / "results"
        if (REPO / "data" / "results").is_dir():
            shutil.copytree(REPO / "data" / "results", results)  # recorded results, written to a copy
            shutil.copytree(REPO / "data" / "results", root / "recorded")  # as they were before the build
        secret = "labkit-secret-" + secrets.token_hex(8)
        proc = _run_report(root / "out", results, env_extra={"LABKIT_TEST_SECRET": secret})
        return {"secret": secret, "args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout,
                "stderr": proc.stderr}

    b = _once_per_run(tmp_path_factory, "lab_report", build)
    proc = subprocess.CompletedProcess(b["args"], b["returncode"], b["stdout"], b["stderr"])
    recorded = tracked_results(root / "recorded") if (root / "recorded").is_dir() else []
    return LabReport(root / "out", b["secret"], proc, recorded)


@pytest.fixture(scope="session")
def page_visits(browser, lab_report, tmp_path_factory) -> dict:
    """Per page of the lab report (by its name; ``index`` too): :func:`_visit`'s facts, each page visited
    once per test run whichever module and worker asks first."""
    return _once_per_run(tmp_path_factory, "page_visits",
                         lambda: _visits(browser, sorted(lab_report.out.glob("*.html"))))


def test_lab_report_builds(lab_report):
    out, proc = lab_report.out, lab_report.proc
    assert (out / "index.html").is_file(), proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]


#: most bytes the whole report folder may weigh (``du -sh reports/`` after ``make report``)
REPORT_FOLDER_BYTES = 10 * 1024 * 1024


def test_lab_report_folder_weight(lab_report):
    """The whole folder within 10 MB; plotly.js once, in ``_static``, and no page carrying it or MathJax."""
    out = lab_report.out
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert total <= REPORT_FOLDER_BYTES, {p.relative_to(out).as_posix(): p.stat().st_size for p in out.rglob("*")
                                          if p.is_file()}
    assert (out / "_static" / "plotly.min.js").is_file()
    for page in sorted(out.glob("[0-9][0-9]_*.html")):
        text = page.read_text(encoding="utf-8")
        assert "plotly.js v" not in text and "MathJax.Hub" not in text, page.name
        assert '<script src="_static/plotly.min.js"></script>' in text or "plotly-graph-div" not in text, page.name


def test_a_page_exported_alone_opens_offline_with_every_figure_drawn(browser, lab_report, tmp_path):
    """``labkit report --single``: the page copied away from everything else draws every figure."""
    proc = _run_report(tmp_path / "single", lab_report.out.parent / "results", "--single", "--no-save",
                       "--only", "04_prefix_attention_kernel")
    assert proc.returncode == 0, proc.stderr[-3000:]
    alone = tmp_path / "alone"
    alone.mkdir()
    path = shutil.copy(tmp_path / "single" / "04_prefix_attention_kernel.html", alone)
    page, bad = _open(browser, Path(path))
    try:
        n = _wait_for_figures(page)
        drawn = page.evaluate("() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
                              ".filter(g => g.querySelector('.main-svg') && g.data.length).length")
    finally:
        page.close()
    assert n >= 4 and drawn == n and not bad, (n, drawn, bad)


def test_lab_report_pages_render_offline(lab_report, page_visits):
    out = lab_report.out
    pages = sorted(out.glob("[0-9][0-9]_*.html"))
    assert pages, "no notebook pages exported"
    problems = [p for path in [*pages, out / "index.html"] for p in _render_problems(path, page_visits[path.stem])]
    assert not problems, "\n".join(problems)


def test_lab_report_leaks_no_secret_or_identity(lab_report):
    out, secret = lab_report.out, lab_report.secret
    import getpass
    import socket

    # short host or user names ("vm", "root") occur by chance in embedded JavaScript
    needles = [secret] + [n for n in (socket.gethostname(), getpass.getuser()) if len(n) >= 6]
    for path in [*out.glob("*.html"), out / "report.json"]:
        text = path.read_text(encoding="utf-8")
        for needle in needles:
            assert needle not in text, f"{path.name} contains {needle!r}"


def test_lab_report_pages_show_their_content(lab_report, page_visits):
    """Every page has its defining headings, its figures drawn with data (no "no result"
    placeholder) and the key numbers of the recorded results it read (report_pages.PAGES)."""
    pages = {p.stem: p for p in sorted(lab_report.out.glob("[0-9][0-9]_*.html"))}
    assert pages, "no notebook pages exported"
    unlisted = sorted(set(pages) - set(PAGES))
    assert not unlisted, f"pages without expectations: {unlisted} (add an entry to tests/report_pages.py PAGES)"
    absent = sorted(set(PAGES) - set(pages))
    assert not absent, f"expected pages not in the report: {absent} ({lab_report.proc.stderr[-1500:]})"
    rec = Recorded(lab_report.recorded)
    problems = [p for name, path in pages.items()
                for p in page_problems(name, page_visits[name]["content"], PAGES[name], rec)]
    assert not problems, "\n".join(problems)


#: the pages rebuilt against a store whose results do not load (both read recorded results, and are fast)
UNLOADED_PAGES = ("06_compare_gpus", "04_prefix_attention_kernel")


def test_page_check_fails_when_results_did_not_load(browser, tmp_path):
    """Pages built against a results store whose files do not load (each file cut short: invalid
    JSON, skipped with a warning) are marked failed and ``labkit report`` exits 1; they draw only
    "no result" placeholders, and the content check fails on each of them, for its figures and for
    its key numbers."""
    broken = tmp_path / "results"
    shutil.copytree(REPO / "data" / "results", broken)
    for path in broken.glob("*/*.json"):
        path.write_text(path.read_text(encoding="utf-8")[:40], encoding="utf-8")
    with pytest.warns(UserWarning, match="skipping"):
        assert load_results(broken) == []
    proc = _run_report(tmp_path / "out", broken, "--no-save", "--only", *UNLOADED_PAGES)
    assert proc.returncode == 1, proc.stderr[-3000:]  # every page exported, each marked failed
    manifest = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert {n["name"]: n["ok"] for n in manifest["notebooks"]} == dict.fromkeys(UNLOADED_PAGES, False)
    assert all("did not load" in n["error"]["error"] for n in manifest["notebooks"])
    rec = Recorded(tracked_results(REPO / "data" / "results"))  # what the pages should have shown
    visits = _visits(browser, [tmp_path / "out" / f"{name}.html" for name in UNLOADED_PAGES])
    for name in UNLOADED_PAGES:
        facts = visits[name]["content"]
        assert facts["figures"], f"{name}: no figure at all"
        problems = page_problems(name, facts, PAGES[name], rec)
        assert any("figures with data, expected at least" in p for p in problems), problems
        assert any("figures without data" in p for p in problems), problems
        assert any("key numbers of the recorded results not shown" in p for p in problems), problems
        assert not any("no heading" in p for p in problems), problems  # the page itself was built
