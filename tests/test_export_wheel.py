"""A pip-installed labkit exports a widget notebook offline from the command JupyterLab's menu runs.

The labkit wheel is built from a copy of the sources (as ``scripts/wheelhouse.sh`` does) and
installed with pip into a fresh venv outside the checkout, which has no ``node_modules`` and
no npm: only the wheel's own page assets. The venv's other packages (the report extra, torch)
are this test environment's, linked in one by one (labkit's editable install left out), the
way ``scripts/offline_check.sh`` builds its node: installing them for real needs an index,
which ``make offline-check`` covers. In that venv a notebook with a plotly figure and the
lab's mask widget is executed (widget state stored, as JupyterLab saves it) and exported with
``python -m nbconvert --to labkit_html`` (nbconvert's own app, what ``jupyter nbconvert`` and
the export menu's server handler run); the page must fit the page budget and, opened in
Chromium with the network blocked, make no outside request and draw its figures and widget.
Then the wheel's renderer is removed: the export exits 2 with one line and writes nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

REPO = Path(__file__).resolve().parents[1]
NODE_MODULES = REPO / "node_modules"
SITE = Path(sysconfig.get_paths()["purelib"])
CELLS = [
    "from labkit.viz.notebook import setup_notebook, declare_sources\nsetup_notebook()\n"
    "declare_sources('simulated')",
    "from labkit.viz.lab.mask import plot_mask\nplot_mask(12, 12, [(2, 5)])",
    "from labkit.widgets.mask import make_mask_widget\nmake_mask_widget(q_len=8, kv_len=8, ranges='1-3')",
]
CDN_HOSTS = ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com", "cdn.plot.ly")


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LABKIT_NODE_MODULES", "PYTHONPATH"))}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, **kw)


def _build_wheel(dest: Path) -> Path:
    src = dest / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "labkit", src / "labkit", ignore=shutil.ignore_patterns("__pycache__", "vendor"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", str(dest), str(src)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, LABKIT_NODE_MODULES=str(NODE_MODULES)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return next(dest.glob("labkit-*.whl"))


def _venv_with_wheel(root: Path, wheel: Path) -> Path:
    """A venv outside the checkout: this environment's packages linked in, labkit from ``wheel``."""
    venv = root / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    linked = root / "linked-site"
    linked.mkdir()
    for entry in SITE.iterdir():
        name = entry.name
        if name.startswith(("labkit", "__editable__", "__pycache__")) or name.endswith(".pth"):
            continue
        os.symlink(entry, linked / name)
    vpy = venv / "bin" / "python"
    vsite = Path(_run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (vsite / "_linked_site.pth").write_text(str(linked) + "\n")
    (venv / "share").mkdir(exist_ok=True)
    os.symlink(Path(sys.prefix) / "share" / "jupyter", venv / "share" / "jupyter")  # nbconvert's templates
    proc = _run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "--quiet", "--no-deps",
                 "--no-index", str(wheel)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return vpy


def _export(vpy: Path, notebook: Path, out: Path) -> subprocess.CompletedProcess:
    return _run([str(vpy), "-m", "nbconvert", "--to", "labkit_html", str(notebook), "--output-dir", str(out)],
                cwd=notebook.parent)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if not (NODE_MODULES / "@jupyter-widgets" / "html-manager" / "dist" / "embed-amd.js").is_file():
        pytest.skip("node_modules not installed (npm ci): the wheel would carry no page assets")
    root = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(root / "dist")
    vpy = _venv_with_wheel(root, wheel)
    work = root / "work"  # neither the checkout nor below it
    work.mkdir()
    code = f"""
import sys, nbformat, labkit
from pathlib import Path
from labkit.report.execute import execute_notebook
print(labkit.__file__)
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in {CELLS!r}])
nb.metadata["kernelspec"] = {{"name": "python3", "display_name": "Python 3", "language": "python"}}
result = execute_notebook(nb, cwd=Path.cwd(), timeout=300)
assert result.error is None, result.error
nbformat.write(nb, "mask.ipynb")
"""
    proc = _run([str(vpy), "-c", code], cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"root": root, "wheel": wheel, "python": vpy, "labkit": Path(proc.stdout.strip().splitlines()[0]),
            "notebook": work / "mask.ipynb"}


def test_wheel_carries_the_page_assets_and_labkit_comes_from_it(installed):
    import zipfile

    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    assert {"labkit/report/vendor/embed-amd.js.gz", "labkit/report/vendor/require.js"} <= names
    assert installed["labkit"].resolve().is_relative_to(installed["root"] / "venv")
    assert not installed["labkit"].resolve().is_relative_to(REPO)


def test_exported_widget_page_is_offline_within_budget_and_draws(installed, browser):
    from labkit.report.pagesize import PAGE_BUDGET_BYTES, page_report

    out = installed["root"] / "page"
    proc = _export(installed["python"], installed["notebook"], out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page_path = out / "mask.html"
    text = page_path.read_text(encoding="utf-8")
    facts = page_report(text)
    assert facts.total_bytes <= PAGE_BUDGET_BYTES, facts
    assert facts.plotly_bundles == 0 and facts.mathjax_refs == 0
    assert not [h for h in CDN_HOSTS if h in text]
    assert not re.search(r"""src=["']?(https?:)?//""", text)

    page = browser.new_page()
    outside: list[str] = []
    failed: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(("file://", "data:", "blob:", "about:"))
            else outside.append(r.url[:120]))
    page.on("requestfailed", lambda r: failed.append(f"{r.url[:120]} ({r.failure})"))
    page.route(re.compile(r"^(https?|wss?|ftp)://"), lambda route: route.abort())
    try:
        page.goto(page_path.resolve().as_uri(), wait_until="load")
        page.wait_for_function(
            "() => { const g = document.querySelectorAll('.plotly-graph-div');"
            " return g.length >= 2 && Array.from(g).every(x => x.querySelector('.main-svg')); }", timeout=60_000)
        page.wait_for_selector(".widget-slider", timeout=60_000)
        page.wait_for_load_state("networkidle")
        n_graphs = page.locator(".plotly-graph-div").count()
        sliders = page.locator(".widget-slider").count()
        text_box = page.locator(".widget-text input").count()
    finally:
        page.close()
    assert outside == [] and failed == []
    assert n_graphs == 2  # the figure, and the widget's heatmap in its saved view
    assert sliders == 3 and text_box == 1  # keys, queries, window; the ranges box


def test_export_refuses_in_one_line_without_the_wheels_renderer(installed):
    vendor = installed["labkit"].parent / "report" / "vendor"
    renderer = vendor / "embed-amd.js.gz"
    kept = installed["root"] / "embed-amd.js.gz.kept"
    shutil.move(renderer, kept)
    out = installed["root"] / "refused"
    try:
        proc = _export(installed["python"], installed["notebook"], out)
    finally:
        shutil.move(kept, renderer)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("[NbConvertApp]")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("labkit_html: the widget renderer (html-manager/embed-amd.js) is missing")
    assert "npm ci" in lines[0] and "Traceback" not in proc.stderr
    assert not (out / "mask.html").exists()
