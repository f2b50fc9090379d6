"""The ``labkit_html`` nbconvert exporter: found by name, and its page works offline.

A notebook with a plotly figure and an ipywidget is executed with nbclient, exported with
``jupyter nbconvert --to labkit_html`` (the name resolved through the ``nbconvert.exporters``
entry point, as JupyterLab's export menu does), then opened in Chromium with every network
request blocked: the figure draws, the code is folded, the widget is one line saying where it runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

from labkit.report.exporter import LIVE_NOTE, LabkitHTMLExporter, apply_cell_tags, provenance_html  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

CELLS = [
    "from labkit.viz.notebook import setup_notebook, declare_sources\nsetup_notebook()\n"
    "declare_sources('simulated')",
    "from labkit.viz.lab.mask import plot_mask\nplot_mask(12, 12, [(2, 5)])",
    "import ipywidgets as w\nw.IntSlider(value=3, description='n')",
]


def _executed_notebook(folder: Path) -> Path:
    from labkit.report.execute import execute_notebook

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    result = execute_notebook(nb, cwd=folder, timeout=300)
    assert result.error is None, result.error
    path = folder / "page.ipynb"
    nbformat.write(nb, path)
    return path


def test_provenance_header_without_a_report_run():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={"text/html": "x"},
                                                  metadata={"labkit_sources": ["interpreted"]})]
    nb.cells[0].metadata["execution"] = {"iopub.execute_input": "2026-01-02T03:04:05.000Z",
                                         "shell.execute_reply": "2026-01-02T03:09:00.000Z"}
    header = provenance_html(nb)
    assert 'data-source="interpreted"' in header and "correctness only" in header
    assert "between 2026-01-02 03:04 and 2026-01-02 03:09" in header
    assert "exported on" in header and "labkit" in header
    run = {"machine": "h200", "device": "cuda", "labkit_commit": "unknown",
           "results": [{"machine": "h200", "name": "engine", "labkit_commit": "0123456789ab+dirty"}]}
    header = provenance_html(nb, run)
    assert "<b>cuda</b> on <code>h200</code>" in header and "commit unknown" in header
    assert "h200/engine" in header and "uncommitted changes" in header


def test_provenance_folds_into_a_one_line_summary():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    run = {"machine": "h200", "device": "cuda", "size": "full", "labkit_commit": "abc",
           "results": [{"machine": "h200", "name": n, "labkit_commit": c} for n, c in (("a", "x"), ("b", "x"), ("c", "y"))]}
    header = provenance_html(nb, run)
    assert header.startswith("<details") and header.endswith("</details>")
    summary = re.search(r"<summary>(.*?)</summary>", header).group(1)
    assert "full size, executed on cuda (h200)" in summary and "3 recorded results read, from 2 labkit commits" in summary
    assert "h200/a" not in summary and "h200/a" in header  # the files behind the click


def test_page_leaves_out_tagged_inputs_and_the_parameters_cells_and_folds_the_rest():
    cells = [nbformat.v4.new_markdown_cell("# Title"),
             nbformat.v4.new_code_cell("answer_cell_source()", metadata={"tags": ["remove-input"]}),
             nbformat.v4.new_code_cell("device = 'auto_original'", metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell("# Parameters\ndevice = 'cpu_injected'", metadata={"tags": ["injected-parameters"]}),
             nbformat.v4.new_code_cell("setup_cell_source()", metadata={"tags": ["remove-input"]}),
             nbformat.v4.new_code_cell("dropped_cell_source()", metadata={"tags": ["remove-cell"]}),
             nbformat.v4.new_code_cell("visible_cell_source()")]
    cells[1].outputs = [nbformat.v4.new_output("display_data", data={"text/html": "<p>the answer box</p>"})]
    nb = nbformat.v4.new_notebook(cells=cells)
    body, _ = LabkitHTMLExporter().from_notebook_node(nb)
    assert "the answer box" in body and "visible_cell_source" in body
    for hidden in ("answer_cell_source", "auto_original", "cpu_injected", "setup_cell_source", "dropped_cell_source"):
        assert hidden not in body, hidden
    folded = re.search(r'<details class="labkit-code"><summary>code</summary>(.*?)</details>', body, re.S)
    assert folded and "visible_cell_source" in folded.group(1)
    assert len(nb.cells) == 7 and nb.cells[1].source == "answer_cell_source()"  # the notebook is left as it was


def test_pages_name_no_script_from_outside():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T")])
    single, _ = LabkitHTMLExporter().from_notebook_node(nb)
    linked, _ = LabkitHTMLExporter(static_url="_static").from_notebook_node(nb)
    for page in (single, linked):
        assert not re.search(r"""src=["']?(https?:)?//""", page)  # no CDN script
        assert "mathjax" not in page.lower() and "require.js" not in page
    assert nb.cells[0].source == "# T"  # the caller's notebook is left as it was


def test_a_widget_becomes_one_line_and_its_state_is_dropped():
    cell = nbformat.v4.new_code_cell("make_widget()")
    view = {"application/vnd.jupyter.widget-view+json": {"model_id": "m1", "version_major": 2},
            "text/plain": "IntSlider(value=3)"}
    cell.outputs = [nbformat.v4.new_output("display_data", data=view),
                    nbformat.v4.new_output("display_data", data={"text/html": "<p>kept</p>"})]
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"m1": {}}}}
    apply_cell_tags(nb)
    assert [o["data"] for o in nb.cells[0].outputs] == [{"text/html": LIVE_NOTE}, {"text/html": "<p>kept</p>"}]
    assert "widgets" not in nb.metadata


@pytest.mark.slow
@pytest.mark.browser
def test_export_by_name_opens_offline_with_its_figure_and_code_folded(tmp_path, browser):
    path = _executed_notebook(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "labkit_html", str(path), "--output-dir", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    page_path = tmp_path / "page.html"
    assert page_path.is_file()

    page = browser.new_page()
    external: list[str] = []
    failed: list[str] = []

    def block(route):
        external.append(route.request.url[:120])
        route.abort()

    page.route(re.compile(r"^(https?|wss?|ftp)://"), block)
    page.on("requestfailed", lambda r: failed.append(r.url[:120]))
    try:
        page.goto(page_path.resolve().as_uri(), wait_until="load")
        page.wait_for_load_state("networkidle")
        graphs = page.locator(".plotly-graph-div")
        page.wait_for_function(
            "() => { const g = document.querySelectorAll('.plotly-graph-div');"
            " return g.length >= 1 && Array.from(g).every(x => x.querySelector('.main-svg')); }",
            timeout=60_000)
        n_graphs = graphs.count()
        live = page.locator(".labkit-live-note").count()
        code_shown = page.evaluate("() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputArea'))"
                                   ".filter(e => !e.closest('details:not([open])') && e.getClientRects().length).length")
        page.locator("details.labkit-code summary").first.click()
        code_after_click = page.evaluate("() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputArea'))"
                                         ".filter(e => !e.closest('details:not([open])') && e.getClientRects().length).length")
        header = page.inner_text(".labkit-provenance")
    finally:
        page.close()
    assert external == [] and failed == []
    assert n_graphs == 1 and live == 1
    assert code_shown == 0 and code_after_click == 1
    assert "simulated" in header and "exported on" in header
