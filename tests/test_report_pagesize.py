"""The report page budget: plotly.js compressed or shared, big figure scripts compressed, no MathJax
(the lab's own pages against the budget: ``test_report_browser.test_lab_report_within_page_budget``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labkit.report.pagesize import COMPRESS_OVER_BYTES, SHARED_NAME, page_report, shrink_page, unpack

REPO = Path(__file__).resolve().parents[1]
HUB = ('if (window.MathJax && window.MathJax.Hub && window.MathJax.Hub.Config) '
       '{window.MathJax.Hub.Config({SVG: {font: "STIX-Web"}});}')
BUNDLE = "/**\n* plotly.js v9.9.9\n* Licensed under the MIT license\n*/\nwindow.Plotly = {fake: " + "1," * 20000 + "0};"


def _page(figure_js: str, bundle: str = BUNDLE) -> str:
    """A page laid out as nbconvert writes plotly's notebook renderer output."""
    return (
        "<html><head></head><body>\n"
        f"<script>\nwindow.PlotlyConfig = {{MathJaxConfig: 'local'}};\n{HUB}\n</script>\n"
        f"<script>{bundle}</script>\n"
        f'<div><script>{HUB}</script> <div class="plotly-graph-div" id="g1"></div> <script>{figure_js}</script></div>\n'
        '<script type="application/vnd.jupyter.widget-state+json">{"state": {}}</script>\n'
        '<script>var small = 1;</script>\n</body></html>'
    )


def _packed(page: str) -> list[str]:
    return re.findall(r'labkit(?:Unpack|Run)\("([A-Za-z0-9+/=]+)"\)', page)


def test_inline_compresses_the_bundle_and_big_figures_and_drops_mathjax():
    big = "Plotly.newPlot('g1', [{x: [" + ",".join(str(i) for i in range(30000)) + "]}]);"
    assert len(big) > COMPRESS_OVER_BYTES
    page = _page(big)
    out = shrink_page(page)
    assert BUNDLE not in out and big not in out
    assert sorted(unpack(b) for b in _packed(out)) == sorted([BUNDLE, big])  # both round-trip exactly
    assert "MathJax.Hub" not in out and "window.PlotlyConfig = {MathJaxConfig: 'local'};" in out
    assert "DecompressionStream" in out
    assert '<script type="application/vnd.jupyter.widget-state+json">{"state": {}}</script>' in out
    assert "<script>var small = 1;</script>" in out
    assert out.count("<script") == out.count("</script>")
    facts = page_report(out)
    assert facts.plotly_bundles == 0 and facts.mathjax_refs == 0 and facts.total_bytes < len(page) / 2
    assert page_report(page).plotly_bundles == 1


def test_small_figures_are_left_as_they_are():
    out = shrink_page(_page("Plotly.newPlot('g1', []);"))
    assert "<script>Plotly.newPlot('g1', []);</script>" in out
    assert [unpack(b) for b in _packed(out)] == [BUNDLE]


def test_shared_writes_one_bundle_next_to_the_pages(tmp_path):
    static = tmp_path / "_static"
    out = shrink_page(_page("Plotly.newPlot('g1', []);"), plotly="shared", static_dir=static)
    assert (static / SHARED_NAME).read_text(encoding="utf-8") == BUNDLE
    assert f'<script src="_static/{SHARED_NAME}"></script>' in out
    assert BUNDLE not in out and _packed(out) == []
    # a second copy of the bundle on one page is dropped; the first serves it
    twice = _page("x();").replace("<div>", f"<script>{BUNDLE}</script><div>")
    assert shrink_page(twice, plotly="shared", static_dir=static).count(SHARED_NAME) == 1


def test_page_without_plotly_and_bad_modes(tmp_path):
    plain = "<html><body><p>no figures</p></body></html>"
    assert shrink_page(plain) == plain
    with pytest.raises(ValueError, match="unknown plotly mode"):
        shrink_page(plain, plotly="cdn")
    with pytest.raises(ValueError, match="static_dir"):
        shrink_page(plain, plotly="shared")


def _real_page(tmp_path: Path) -> str:
    """A page with the real plotly.js, a small figure and one far over the compression threshold."""
    import numpy as np
    import plotly.graph_objects as go
    import plotly.io as pio

    small = go.Figure(go.Bar(x=[1, 2, 3], y=[3, 1, 2]))
    rng = np.random.default_rng(0)
    big = go.Figure(go.Scatter(x=rng.random(20000), y=rng.random(20000), text=[f"point {i}" for i in range(20000)],
                               mode="markers"))
    parts = [pio.to_html(small, include_plotlyjs=True, full_html=False, include_mathjax=False),
             pio.to_html(big, include_plotlyjs=False, full_html=False, include_mathjax=False)]
    return "<html><head><meta charset='utf-8'></head><body>" + "".join(parts) + "</body></html>"


@pytest.mark.browser
@pytest.mark.parametrize("mode", ["inline", "shared"])
def test_shrunk_pages_draw_every_figure_offline(browser, tmp_path, mode):
    page = _real_page(tmp_path)
    assert page_report(page).plotly_bundles == 1
    out = shrink_page(page, plotly=mode, static_dir=tmp_path / "_static")
    assert page_report(out).plotly_bundles == 0
    path = tmp_path / "page.html"
    path.write_text(out, encoding="utf-8")
    tab = browser.new_page()
    outside: list[str] = []
    tab.on("request", lambda r: None if r.url.startswith(("file://", "data:", "blob:", "about:"))
           else outside.append(r.url))
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    try:
        tab.goto(path.as_uri(), wait_until="load")
        tab.wait_for_function("() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
                              ".every(g => g.querySelector('.main-svg'))", timeout=30_000)
        assert tab.locator(".plotly-graph-div").count() == 2
        assert tab.evaluate("() => document.querySelectorAll('.plotly-graph-div')[1]._fullData[0].x.length") == 20000
        assert tab.evaluate("() => typeof window.Plotly.newPlot === 'function' && !!window.Plotly.version")
        assert not outside and not errors
    finally:
        tab.close()


def test_notebook_texts_use_no_formulas():
    """Pages load no MathJax, so no markdown cell may rely on TeX ($...$, $$, \\( \\), \\[ \\])."""
    import jupytext

    tex = re.compile(r"\$\$|\$[^$\s][^$\n]*[^$\s\\]\$|\\\(|\\\[")
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py")):
        nb = jupytext.read(path)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown":
                assert not tex.search(cell.source), f"{path.name} cell {i}: {tex.search(cell.source).group(0)!r}"
    assert tex.search("the cost is $O(n^2)$") and tex.search(r"\(x\)") and not tex.search("costs $5 and $OUT")


def test_scripts_before_the_loader_are_not_compressed():
    big = "Plotly.newPlot('g0', [{x: [" + ",".join(str(i) for i in range(30000)) + "]}]);"
    page = _page("x();").replace("<html><head></head><body>\n", f"<html><head></head><body>\n<script>{big}</script>\n")
    out = shrink_page(page)
    assert f"<script>{big}</script>" in out  # it runs before window.labkitRun exists: left as it was
    assert [unpack(b) for b in _packed(out)] == [BUNDLE]
    assert shrink_page(out) == out  # a shrunk page stays as it is


def test_report_command_line_plotly_option(capsys):
    from labkit.report.build import _parser

    assert _parser().parse_args([]).plotly == "inline"
    assert _parser().parse_args(["--plotly", "shared"]).plotly == "shared"
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["--plotly", "cdn"])
    assert exc.value.code == 2 and "--plotly" in capsys.readouterr().err


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["inline", "shared"])
def test_report_pages_in_either_mode_draw_offline(browser, tmp_path, monkeypatch, mode):
    """``build_report(plotly=...)`` end to end: the page's figures draw from file:// with nothing fetched."""
    from report_helpers import TOGGLE_CELLS, write_notebook

    from labkit.report.build import build_report

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    write_notebook(nbdir, "00_toggles", "Toggles", TOGGLE_CELLS)
    runs = build_report(tmp_path / "out", device="cpu", notebooks_dir=nbdir, log=lambda m: None, save=False,
                        plotly=mode)
    assert all(r.ok for r in runs), [r.error for r in runs]
    path = tmp_path / "out" / "00_toggles.html"
    text = path.read_text(encoding="utf-8")
    assert page_report(text).plotly_bundles == 0
    assert (tmp_path / "out" / "_static" / SHARED_NAME).is_file() == (mode == "shared")
    tab = browser.new_page()
    outside: list[str] = []
    tab.on("request", lambda r: None if r.url.startswith(("file://", "data:", "blob:", "about:"))
           else outside.append(r.url))
    try:
        tab.goto(path.as_uri(), wait_until="load")
        tab.wait_for_function("() => document.querySelectorAll('.plotly-graph-div').length == 2 && "
                              "Array.from(document.querySelectorAll('.plotly-graph-div'))"
                              ".every(g => g.querySelector('.main-svg'))", timeout=30_000)
        assert not outside
    finally:
        tab.close()
