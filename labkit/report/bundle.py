"""The page assets the labkit package carries, and how they are made from npm's ``node_modules``.

An exported page needs require.js (nbconvert's lab template loads it) and, when the notebook
stored widget state, the widget renderer (``@jupyter-widgets/html-manager``'s
``embed-amd.js``, 3.6 MB). Both are npm packages (``package.json``); :func:`bundle_assets`
turns an installed ``node_modules`` into the folder ``labkit/report/vendor/`` the wheel
carries (``setup.py``'s build step calls it), so a pip-installed labkit exports pages with no
npm at all:

- ``require.js`` as it is (86 kB);
- ``embed-amd.js.gz``: the renderer gzip-compressed (about 0.9 MB), the form a single-file
  page inlines (unpacked by the browser, as plotly.js is; :mod:`labkit.report.pagesize`);
- ``html-manager.LICENSE.txt``: the licence notices of what the renderer bundles;
- ``assets.json``: each package's version and licence, and each file's SHA-256.

This module uses the standard library only: ``setup.py`` loads it by path, before labkit or
its dependencies are installed. :mod:`labkit.report.assets` finds the files at export time.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

#: where each asset comes from in node_modules
REQUIRE_JS_SOURCE = "requirejs/require.js"
RENDERER_SOURCE = "@jupyter-widgets/html-manager/dist/embed-amd.js"
RENDERER_LICENSE_SOURCE = "@jupyter-widgets/html-manager/dist/embed.js.LICENSE.txt"
#: the names inside labkit/report/assets
REQUIRE_JS = "require.js"
RENDERER_GZ = "embed-amd.js.gz"
RENDERER_LICENSE = "html-manager.LICENSE.txt"
MANIFEST = "assets.json"
PACKAGES = {"html-manager": "@jupyter-widgets/html-manager", "requirejs": "requirejs"}


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed, level 9, mtime 0 (the same input always gives the same bytes)."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def missing_sources(node_modules: Path | str) -> list[str]:
    """The files :func:`bundle_assets` needs that ``node_modules`` lacks (relative paths)."""
    root = Path(node_modules)
    return [rel for rel in (REQUIRE_JS_SOURCE, RENDERER_SOURCE) if not (root / rel).is_file()]


def _package_facts(root: Path, package: str) -> dict:
    try:
        meta = json.loads((root / package / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"package": package}
    return {"package": package, "version": meta.get("version"), "license": meta.get("license")}


def bundle_assets(node_modules: Path | str, target: Path | str) -> list[str]:
    """Write the package's page assets from ``node_modules`` into ``target``; return the names written.

    Returns ``[]`` (and writes nothing) when ``node_modules`` lacks either source file: a wheel
    built then carries no assets, and its exports refuse with one line saying so.
    """
    root, target = Path(node_modules), Path(target)
    if missing_sources(root):
        return []
    target.mkdir(parents=True, exist_ok=True)
    files = {
        REQUIRE_JS: (root / REQUIRE_JS_SOURCE).read_bytes(),
        RENDERER_GZ: gzip_bytes((root / RENDERER_SOURCE).read_bytes()),
    }
    if (root / RENDERER_LICENSE_SOURCE).is_file():
        files[RENDERER_LICENSE] = (root / RENDERER_LICENSE_SOURCE).read_bytes()
    for name, data in files.items():
        tmp = target / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(target / name)
    manifest = {
        "packages": {key: _package_facts(root, pkg) for key, pkg in PACKAGES.items()},
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return sorted([*files, MANIFEST])

