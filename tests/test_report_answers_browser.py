"""Every page of the lab report as a reader meets it, at 1280 px in headless Chromium.

Per page (the lab report ``test_report_browser`` builds: its ``lab_report`` fixture, quick size,
this machine's CPU, once per test run; each page visited once for both modules: ``page_visits``):

- its answer box within the first 1400 px and above its first figure, with a number in it; no table
  wider than its container or the page; no visible "FAIL" outside a closed ``<details>``;
- ``answer_agrees``: each number the answer states is printed, equally rounded, in the page's text
  below it as a reader sees it (text and tables after the box; code, figures and closed folds left
  out);
- ``answer_words``: at most 80 words in the box as a reader sees it (its tables, charts and closed
  folds left out, its source line counted);
- ``height``: at most 8,000 px tall (08: 6,000);
- ``figures_drawn``: every plotly figure drawn, with data;
- ``code_folded``: no input code visible until a reader asks for it;
- ``try_it_live``: a page with a "Try it live" section (exactly :data:`TRY_IT_LIVE`) has a figure
  there whose own control, clicked as a reader does, changes what it shows (no kernel);
- ``readable``: no parametrised test id (``triton_prefix[m128n32w8s2]``) anywhere, no file name in
  the answer box, a visible table cell or a figure's labels, no visible table cell that reads NaN
  or None.

"""

from __future__ import annotations

import json
import re

import pytest
from report_pages import PAGES, has_data
from test_report_browser import lab_report, page_visits  # noqa: F401 (the session's report, each page visited once)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ANSWER_WITHIN_PX = 1400
MAX_ANSWER_WORDS = 80
MAX_HEIGHT_PX = {"08_inside_vllm": 6000}
DEFAULT_MAX_HEIGHT_PX = 8000
#: the pages with a "Try it live" section
TRY_IT_LIVE = ("01_placeholder_scheduler", "02_idle_bubbles", "03_h2d_prefix_ranges", "04_prefix_attention_kernel",
               "07_next_bubble")
CHECKS = ("answer_agrees", "answer_words", "height", "figures_drawn", "code_folded", "try_it_live", "readable")


def reader_problems(name: str, facts: dict) -> list[str]:
    """What a page shows its reader wrong, from :data:`report_pages.READER_FACTS_JS`'s facts (empty: nothing)."""
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


def test_every_page_opens_with_its_answer_and_reads_at_1280_px(lab_report, page_visits):  # noqa: F811
    pages = sorted(p.stem for p in lab_report.out.glob("[0-9][0-9]_*.html"))
    assert pages, f"no notebook pages exported ({lab_report.proc.stderr[-1500:]})"
    problems = [p for name in pages for p in reader_problems(name, page_visits[name]["reader"])]
    assert not problems, "\n".join(problems)


# -- the numbers of an answer and the evidence below it ------------------------------------------

# a number as a page prints it: 4,096 / 1.04 / 97.4% / 125x / 1.2e+03; not part of a name (#40143, gemma-3-4b,
# H200, 4B, v2)
_NUMBER = re.compile(r"(?<![\w.#/\-])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:e([-+]?\d+))?(?![a-wyz0-9_\-/]|x\w|\.\d)",
                     re.I)
def printed_numbers(text: str) -> list[tuple[str, float, float]]:
    """``(as printed, value, unit of its last digit)`` of each number in ``text``: ``1.04`` -> unit 0.01;
    a rounded integer of four or more digits counts its trailing zeros (``11,700`` -> unit 100)."""
    out = []
    for m in _NUMBER.finditer(text):
        whole, decimals, exp = m.group(1).replace(",", ""), m.group(2) or "", int(m.group(3) or 0)
        value = float(f"{whole}.{decimals}" if decimals else whole) * 10.0 ** exp
        if decimals:
            unit = 10.0 ** (exp - len(decimals))
        else:
            zeros = len(whole) - len(whole.rstrip("0")) if len(whole) > 3 else 0
            unit = 10.0 ** (exp + zeros)
        out.append((m.group(0), value, unit))
    return out


def unsupported_numbers(prose: str, evidence_text: str) -> list[str]:
    """The numbers of ``prose`` not printed in ``evidence_text`` at least as precisely and equal once
    rounded as the prose rounds (a recorded result or a figure's data is not text a reader sees)."""
    shown = printed_numbers(evidence_text)
    return [printed for printed, value, unit in printed_numbers(prose)
            if not any(u <= unit * (1 + 1e-9) and abs(v - value) <= 0.5 * unit * (1 + 1e-9) for _, v, u in shown)]


def test_unsupported_numbers_by_hand():
    prose = "costs 1.04 us against 8.31 ns, 125x; 4,096 reads; 97.4% idle; 11,700 tok/s on gemma-3-4b (#40143)"
    assert [p for p, _, _ in printed_numbers(prose)] == ["1.04", "8.31", "125", "4,096", "97.4", "11,700"]
    evidence = "tensor 1.0412 us | list 8.3 ns | ratio 125.2x | 4096 | 11739 | idle 97.4%"
    # 8.3 is less precise than 8.31
    assert unsupported_numbers(prose, evidence) == ["8.31"]
    assert unsupported_numbers(prose, evidence + " | list 8.312 ns") == []
    assert unsupported_numbers("it took 1.05 ms", "1.04 ms") == ["1.05"]  # not equal once rounded
    assert unsupported_numbers("97.4% idle", "idle 0.974") == ["97.4"]  # in another unit: not what a reader reads


# -- the per-page checks ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def page_checks(lab_report, page_visits):  # noqa: F811
    """Per page: the facts of :data:`report_pages.PAGE_CHECK_FACTS_JS`, what driving its "Try it live"
    figure did (``live_control``, ``live_changed``)."""
    manifest = json.loads((lab_report.out / "report.json").read_text(encoding="utf-8"))
    return {nb["name"]: dict(page_visits[nb["html"].removesuffix(".html")]["checks"]) for nb in manifest["notebooks"]}


def check_problems(name: str, check: str, facts: dict) -> list[str]:
    """What page ``name`` fails of ``check`` (:data:`CHECKS`), from :func:`page_checks`'s facts."""
    if check == "answer_agrees":
        missing = unsupported_numbers(facts["prose"], facts["evidence"])
        return [f"{name}: the answer's {', '.join(missing)} not printed in the page's text below it"] if missing else []
    if check == "answer_words":
        return [f"{name}: the answer box holds {facts['words']} words"] if facts["words"] > MAX_ANSWER_WORDS else []
    if check == "height":
        limit = MAX_HEIGHT_PX.get(name, DEFAULT_MAX_HEIGHT_PX)
        return [f"{name}: {facts['height']} px tall at 1280 px (at most {limit})"] if facts["height"] > limit else []
    if check == "figures_drawn":
        empty = [f["index"] for f in facts["figures"] if not (f["drawn"] and has_data(f))]
        return [f"{name}: figure(s) {empty} of {len(facts['figures'])} drawn without data"] if empty else []
    if check == "code_folded":
        return [f"{name}: {facts['code_shown']} input cell(s) visible"] if facts["code_shown"] else []
    if check == "try_it_live":
        if facts["has_live"] != (name in TRY_IT_LIVE):
            return [f"{name}: a Try it live section {'missing' if name in TRY_IT_LIVE else 'not listed in TRY_IT_LIVE'}"]
        if name not in TRY_IT_LIVE:
            return []
        if facts["live_figure"] < 0 or not facts.get("live_control"):
            return [f"{name}: no figure with a control in its Try it live section"]
        return [] if facts["live_changed"] else [f"{name}: the {facts['live_control']} of Try it live changed nothing"]
    if check == "readable":
        problems = []
        ids = sorted(set(re.findall(r"\w+\[m\d+n\d+w\d+s\d+\]", facts["text_all"] + " ".join(
            label for f in facts["figures"] for label in f["labels"]))))
        if ids:
            problems.append(f"{name}: parametrised test ids on the page: {ids[:3]}")
        files = re.compile(r"[\w.-]+\.(?:json|json\.gz|pt\.trace\.json(?:\.gz)?)\b")
        labelled = [facts["prose"], *facts["table_cells"], *(label for f in facts["figures"] for label in f["labels"])]
        named = sorted({m for text in labelled for m in files.findall(text)})
        if named:
            problems.append(f"{name}: file names as labels: {named[:3]}")
        if facts["bad_cells"]:
            problems.append(f"{name}: {len(facts['bad_cells'])} table cell(s) read NaN or None")
        return problems
    raise ValueError(check)


def test_check_problems_by_hand():
    good = {"prose": "costs 1.04 us", "evidence": "1.04 us", "figures": [], "words": 40,
            "height": 5000, "code_shown": 0, "has_live": False, "live_figure": -1, "text_all": "", "table_cells": [],
            "bad_cells": []}
    assert all(check_problems("00_x", c, good) == [] for c in CHECKS)
    assert check_problems("00_x", "answer_agrees", {**good, "evidence": "1.1 us"})
    assert check_problems("00_x", "answer_words", {**good, "words": 81})
    assert check_problems("00_x", "height", {**good, "height": 8001})
    assert check_problems("08_inside_vllm", "height", {**good, "height": 6001})
    assert check_problems("00_x", "figures_drawn", {**good, "figures": [{"index": 0, "drawn": True, "traces": []}]})
    assert check_problems("00_x", "code_folded", {**good, "code_shown": 1})
    assert check_problems("00_x", "try_it_live", {**good, "has_live": True})
    assert check_problems("03_h2d_prefix_ranges", "try_it_live", good)
    live = {**good, "has_live": True, "live_figure": 2, "live_control": "slider"}
    assert check_problems("03_h2d_prefix_ranges", "try_it_live", {**live, "live_changed": False})
    assert check_problems("03_h2d_prefix_ranges", "try_it_live", {**live, "live_changed": True}) == []
    assert check_problems("00_x", "readable", {**good, "text_all": "triton_prefix[m128n32w8s2] | decode"})
    assert check_problems("00_x", "readable", {**good, "prose": "From: h200/engine_quick.json"})
    assert check_problems("00_x", "readable", {**good, "bad_cells": ["NaN"]})


@pytest.mark.parametrize("name, check", [pytest.param(n, c, id=f"{n}-{c}") for n in sorted(PAGES) for c in CHECKS])
def test_page_reads_as_one_answer_with_its_evidence(page_checks, name, check):
    assert name in page_checks, f"{name}: not in the report"
    problems = check_problems(name, check, page_checks[name])
    assert not problems, "\n".join(problems)
