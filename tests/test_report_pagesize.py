"""What a page carries and what a report shares: plotly.js and large styles once in ``_static``,
big figure scripts compressed, no MathJax (the lab's own report against its size:
``test_report_browser.test_lab_report_folder_weight``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labkit.report.pagesize import COMPRESS_OVER_BYTES, SHARED_PLOTLY, shrink_page, unpack

REPO = Path(__file__).resolve().parents[1]
HUB = ('if (window.MathJax && window.MathJax.Hub && window.MathJax.Hub.Config) '
       '{window.MathJax.Hub.Config({SVG: {font: "STIX-Web"}});}')
BUNDLE = "/**\n* plotly.js v9.9.9\n* Licensed under the MIT license\n*/\nwindow.Plotly = {fake: " + "1," * 20000 + "0};"
CSS = "body { color: red; }\n" * 1000


def _page(figure_js: str, bundle: str = BUNDLE) -> str:
    """A page laid out as nbconvert writes plotly's notebook renderer output."""
    return (
        f"<html><head><style type=\"text/css\">{CSS}</style><style>.small {{}}</style></head><body>\n"
        f"<script>\nwindow.PlotlyConfig = {{MathJaxConfig: 'local'}};\n{HUB}\n</script>\n"
        f"<script>{bundle}</script>\n"
        f'<div><script>{HUB}</script> <div class="plotly-graph-div" id="g1"></div> <script>{figure_js}</script></div>\n'
        '<script>var small = 1;</script>\n</body></html>'
    )


def _packed(page: str) -> list[str]:
    return re.findall(r'labkitRun\("([A-Za-z0-9+/=]+)"\)', page)


BIG = "Plotly.newPlot('g1', [{x: [" + ",".join(str(i) for i in range(30000)) + "]}]);"


def test_single_page_keeps_one_bundle_compresses_big_figures_and_drops_mathjax():
    assert len(BIG) > COMPRESS_OVER_BYTES
    twice = _page(BIG).replace("<div>", f"<script>{BUNDLE}</script><div>")
    out = shrink_page(twice)
    assert out.count(BUNDLE) == 1 and BIG not in out and CSS in out
    assert [unpack(b) for b in _packed(out)] == [BIG]  # round-trips exactly
    assert out.index(BUNDLE) < out.index("labkitRun(\"") and "DecompressionStream" in out
    assert "MathJax.Hub" not in out and "window.PlotlyConfig = {MathJaxConfig: 'local'};" in out
    assert "<script>var small = 1;</script>" in out and out.count("<script") == out.count("</script>")


def test_small_figures_are_left_as_they_are():
    out = shrink_page(_page("Plotly.newPlot('g1', []);"))
    assert "<script>Plotly.newPlot('g1', []);</script>" in out and _packed(out) == []


def test_report_pages_share_one_bundle_and_the_style(tmp_path):
    static = tmp_path / "_static"
    first = shrink_page(_page("Plotly.newPlot('g1', []);"), static_dir=static)
    second = shrink_page(_page(BIG), static_dir=static)
    assert (static / SHARED_PLOTLY).read_text(encoding="utf-8") == BUNDLE
    (css,) = static.glob("style-*.css")
    assert css.read_text(encoding="utf-8") == CSS
    for out in (first, second):
        assert BUNDLE not in out and CSS not in out and "<style>.small {}</style>" in out
        assert f'<script src="_static/{SHARED_PLOTLY}"></script>' in out
        assert f'<link rel="stylesheet" href="_static/{css.name}">' in out
    assert [unpack(b) for b in _packed(second)] == [BIG]
    assert sorted(p.name for p in static.iterdir()) == sorted([SHARED_PLOTLY, css.name])


def test_page_without_plotly(tmp_path):
    plain = "<html><body><p>no figures</p></body></html>"
    assert shrink_page(plain) == plain and shrink_page(plain, static_dir=tmp_path) == plain


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
@pytest.mark.parametrize("single", [True, False])
def test_shrunk_pages_draw_every_figure_offline(browser, tmp_path, single):
    out = shrink_page(_real_page(tmp_path), static_dir=None if single else tmp_path / "_static")
    assert ("plotly.js v" in out) == single
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


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("single", [True, False])
def test_report_pages_either_way_draw_offline(browser, tmp_path, monkeypatch, single):
    """``build_report(single=...)`` end to end: the page's figures draw from file:// with nothing fetched."""
    from report_helpers import TOGGLE_CELLS, write_notebook

    from labkit.report.build import build_report

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    write_notebook(nbdir, "00_toggles", "Toggles", TOGGLE_CELLS)
    runs = build_report(tmp_path / "out", device="cpu", notebooks_dir=nbdir, log=lambda m: None, save=False,
                        single=single)
    assert all(r.ok for r in runs), [r.error for r in runs]
    path = tmp_path / "out" / "00_toggles.html"
    assert ("plotly.js v" in path.read_text(encoding="utf-8")) == single
    assert (tmp_path / "out" / "_static" / SHARED_PLOTLY).is_file() != single
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


def test_report_command_line_single_option():
    from labkit.cli import build_parser

    assert build_parser(["report"]).parse_args(["report"]).single is False
    assert build_parser(["report", "--single"]).parse_args(["report", "--single"]).single is True
