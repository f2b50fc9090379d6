"""The page assets labkit carries: built from npm's files, found at export time, or a one-line refusal.

The bundle is built from a small planted ``node_modules`` (known bytes); the exporter is run
against a package folder and a ``node_modules`` that lack one asset or the other. Real npm
files are used where the checkout has them (``npm ci``), to check what a page inlines.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

from labkit.report import assets, bundle  # noqa: E402
from labkit.report.exporter import RENDERER_ELEMENT_ID, LabkitHTMLExporter  # noqa: E402

CDN_HOSTS = ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com", "cdn.plot.ly", "cdn.mathjax.org")

REQUIRE = b"/* planted require.js */ var requirejs, require, define;\n"
RENDERER = b"/* planted renderer */ " + b"window.labkitPlanted = 1;\n" * 2000


def _node_modules(root: Path, *, require: bool = True, renderer: bool = True) -> Path:
    if require:
        (root / "requirejs").mkdir(parents=True)
        (root / bundle.REQUIRE_JS_SOURCE).write_bytes(REQUIRE)
        (root / "requirejs" / "package.json").write_text('{"version": "9.9.9", "license": "MIT"}')
    if renderer:
        dist = root / "@jupyter-widgets" / "html-manager" / "dist"
        dist.mkdir(parents=True)
        (root / bundle.RENDERER_SOURCE).write_bytes(RENDERER)
        (dist / "embed.js.LICENSE.txt").write_text("notices")
        (dist.parent / "package.json").write_text('{"version": "1.2.3", "license": "BSD-3-Clause"}')
    return root


@pytest.fixture
def only(tmp_path, monkeypatch):
    """Point the asset search at a planted node_modules and an empty package folder."""

    def use(**present) -> Path:
        monkeypatch.setattr(assets, "PACKAGE_ASSETS", tmp_path / "package-vendor")
        nm = _node_modules(tmp_path / "nm", **present)
        monkeypatch.setenv(assets.NODE_MODULES_ENV, str(nm))
        return nm

    return use


def _widget_notebook():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# W")])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"version_major": 2, "version_minor": 0,
                                                                             "state": {}}}
    return nb


def test_bundle_from_node_modules(tmp_path):
    nm = _node_modules(tmp_path / "nm")
    written = bundle.bundle_assets(nm, tmp_path / "vendor")
    assert written == sorted(["require.js", "embed-amd.js.gz", "html-manager.LICENSE.txt", "assets.json"])
    vendor = tmp_path / "vendor"
    assert (vendor / "require.js").read_bytes() == REQUIRE
    packed = (vendor / "embed-amd.js.gz").read_bytes()
    assert gzip.decompress(packed) == RENDERER and len(packed) < len(RENDERER) // 20
    manifest = json.loads((vendor / "assets.json").read_text())
    assert manifest["packages"]["html-manager"]["version"] == "1.2.3"
    assert manifest["packages"]["requirejs"]["license"] == "MIT"
    assert manifest["sha256"]["require.js"] == hashlib.sha256(REQUIRE).hexdigest()
    # the same sources give the same bytes (a reproducible wheel)
    bundle.bundle_assets(nm, tmp_path / "again")
    assert (tmp_path / "again" / "embed-amd.js.gz").read_bytes() == packed


def test_bundle_without_the_renderer_writes_nothing(tmp_path):
    nm = _node_modules(tmp_path / "nm", renderer=False)
    assert bundle.missing_sources(nm) == [bundle.RENDERER_SOURCE]
    assert bundle.bundle_assets(nm, tmp_path / "vendor") == []
    assert not (tmp_path / "vendor").exists()


def test_package_copy_is_read_when_there_is_no_node_modules(tmp_path, monkeypatch):
    vendor = tmp_path / "vendor"
    bundle.bundle_assets(_node_modules(tmp_path / "nm"), vendor)
    monkeypatch.setattr(assets, "PACKAGE_ASSETS", vendor)
    monkeypatch.setenv(assets.NODE_MODULES_ENV, str(tmp_path / "no-such-folder"))
    assert assets.missing() == []
    assert assets.renderer_js() == RENDERER and assets.require_js() == REQUIRE
    assert gzip.decompress(assets.renderer_gzip()) == RENDERER
    static = tmp_path / "out" / "_static"
    assets.vendor(static)
    assert (static / "html-manager" / "embed-amd.js").read_bytes() == RENDERER
    assert (static / "requirejs" / "require.js").read_bytes() == REQUIRE


def test_single_page_inlines_the_compressed_renderer(only):
    only()
    page, _ = LabkitHTMLExporter().from_notebook_node(_widget_notebook())
    m = re.search(rf'<script (?=[^>]*type="application/gzip;base64")[^>]*id="{RENDERER_ELEMENT_ID}"[^>]*>([^<]*)</script>',
                  page)
    assert m, "no inlined renderer"
    assert gzip.decompress(base64.b64decode(m.group(1))) == RENDERER
    require = re.search(r'<script src="data:text/javascript;base64,([^"]*)"></script>', page)
    assert require and base64.b64decode(require.group(1)) == REQUIRE
    assert page.count(RENDERER_ELEMENT_ID) == 2  # the data element and the loader that reads it
    assert not [h for h in CDN_HOSTS if h in page]


def test_linked_page_names_only_the_static_folder(only):
    only(require=False, renderer=False)  # a report page links the shared copy: nothing read here
    page, _ = LabkitHTMLExporter(static_url="_static").from_notebook_node(_widget_notebook())
    assert '<script src="_static/requirejs/require.js"></script>' in page
    assert 's.src = "_static/html-manager/embed-amd.js"' in page
    assert RENDERER_ELEMENT_ID not in page
    assert not [h for h in CDN_HOSTS if h in page]
    assert not re.search(r"""src=["']?(https?:)?//""", page)


def test_widget_page_refuses_without_the_renderer(only):
    only(renderer=False)
    with pytest.raises(assets.MissingAssetError) as err:
        LabkitHTMLExporter().from_notebook_node(_widget_notebook())
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("the widget renderer (html-manager/embed-amd.js) is missing")
    assert "npm ci" in message and "wheel" in message
    # a page without widgets needs only require.js, which is there
    plain = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# P")])
    page, _ = LabkitHTMLExporter().from_notebook_node(plain)
    assert RENDERER_ELEMENT_ID not in page and "data:text/javascript;base64," in page


def test_any_page_refuses_without_require_js(only):
    only(require=False)
    plain = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# P")])
    with pytest.raises(assets.MissingAssetError, match=r"^require\.js is missing from labkit's page assets"):
        LabkitHTMLExporter().from_notebook_node(plain)
    assert assets.missing(with_renderer=True) == ["require.js"]


def test_report_refuses_before_running_a_notebook(only, tmp_path):
    from report_helpers import OK_CELLS, write_notebook

    from labkit.report.build import build_report

    only(renderer=False)
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    write_notebook(nbdir, "00_x", "X", OK_CELLS)
    with pytest.raises(assets.MissingAssetError, match="widget renderer"):
        build_report(tmp_path / "out", device="cpu", notebooks_dir=nbdir, log=lambda m: None, save=False)
    assert not (tmp_path / "out").exists()



@pytest.mark.slow
def test_a_checkout_without_node_modules_still_builds_a_wheel_without_assets(tmp_path):
    """The wheel builds; it carries no page assets and the build says so (an export from it refuses)."""
    import os
    import shutil
    import subprocess
    import sys
    import zipfile

    repo = Path(__file__).resolve().parents[1]
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(repo / name, src / name)
    shutil.copytree(repo / "labkit", src / "labkit", ignore=shutil.ignore_patterns("__pycache__", "vendor"))
    env = {k: v for k, v in os.environ.items() if k != assets.NODE_MODULES_ENV}
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(tmp_path / "dist"), str(src)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "this wheel carries no page assets" in proc.stdout + proc.stderr
    (wheel,) = (tmp_path / "dist").glob("labkit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("labkit/report/vendor/")]
    assert "labkit/report/assets.py" in names and "labkit/viz/gpu_peaks.json" in names
