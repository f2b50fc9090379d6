"""A pip-installed labkit exports a notebook offline from the command JupyterLab's menu runs.

The labkit wheel is built from a copy of the sources (as ``scripts/wheelhouse.sh`` does) and
installed with pip into a fresh venv outside the checkout. The venv's other packages (the
report extra, torch) are this test environment's, linked in one by one (labkit's editable
install left out), the way ``scripts/offline_check.sh`` builds its node: installing them for
real needs an index, which ``make offline-check`` covers. In that venv a notebook with two
plotly figures and a live widget is executed (widget state stored, as JupyterLab saves it) and
exported with ``python -m nbconvert --to labkit_html`` (nbconvert's own app, what ``jupyter
nbconvert`` and the export menu's server handler run): a single page that, opened in Chromium
with the network blocked, makes no outside request, draws both figures, folds its code and
says in one line where the widget runs.
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
SITE = Path(sysconfig.get_paths()["purelib"])
CELLS = [
    "from labkit.viz.notebook import setup_notebook, declare_sources\nsetup_notebook()\n"
    "declare_sources('simulated')",
    "from labkit.viz.lab.mask import plot_mask\nplot_mask(12, 12, [(2, 5)])",
    "from labkit.viz.lab.mask import plot_mask_window_slider\nplot_mask_window_slider(12, 12, [(2, 5)], windows=(0, 4))",
    "import ipywidgets as w\nw.IntSlider(value=3, description='n')",
]
CDN_HOSTS = ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com", "cdn.plot.ly")


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPATH")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, **kw)


def _build_wheel(dest: Path) -> Path:
    src = dest / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "labkit", src / "labkit", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", str(dest), str(src)],
        capture_output=True, text=True, timeout=600)
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
nbformat.write(nb, "page.ipynb")
"""
    proc = _run([str(vpy), "-c", code], cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"root": root, "wheel": wheel, "python": vpy, "labkit": Path(proc.stdout.strip().splitlines()[0]),
            "notebook": work / "page.ipynb"}


def test_labkit_comes_from_the_wheel(installed):
    assert installed["labkit"].resolve().is_relative_to(installed["root"] / "venv")
    assert not installed["labkit"].resolve().is_relative_to(REPO)


def test_exported_page_is_one_offline_file_that_draws(installed, browser):
    out = installed["root"] / "page"
    proc = _export(installed["python"], installed["notebook"], out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page_path = out / "page.html"
    text = page_path.read_text(encoding="utf-8")
    assert "plotly.js v" in text and "<link" not in text  # plotly.js and the style inside the page
    page_itself = re.sub(r"<script>\s*/\*\*\s*\* plotly\.js v.*?</script>", "", text, flags=re.S)  # its own code names CDNs
    assert len(page_itself) < len(text) // 2
    assert not [h for h in CDN_HOSTS if h in page_itself] and not re.search(r"src=[^>]*mathjax", text, re.I)
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
            " return g.length == 2 && Array.from(g).every(x => x.querySelector('.main-svg') && x.data.length); }",
            timeout=60_000)
        page.wait_for_load_state("networkidle")
        live_notes = page.locator(".labkit-live-note").count()
        code_shown = page.evaluate("() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputArea'))"
                                   ".filter(e => !e.closest('details:not([open])') && e.getClientRects().length).length")
    finally:
        page.close()
    assert outside == [] and failed == []
    assert live_notes == 1 and code_shown == 0
