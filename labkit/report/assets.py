"""Finding the page assets at export time: the package's own copy, else a checkout's ``node_modules``.

Each asset (require.js, the widget renderer) comes from the first of: ``$LABKIT_NODE_MODULES``
(an npm folder named explicitly), the package's ``labkit/report/vendor/`` (built into the
wheel from npm's files, see :mod:`labkit.report.bundle`), the checkout's ``node_modules``.
Where none has an asset a page needs, :class:`MissingAssetError` says so in one line with the
fix: a page never falls back to a CDN.
"""

from __future__ import annotations

import functools
import gzip
import os
from pathlib import Path

from labkit.errors import UsageError
from labkit.report import bundle

NODE_MODULES_ENV = "LABKIT_NODE_MODULES"
PACKAGE_ASSETS = Path(__file__).resolve().parent / "vendor"
#: the names a linked page uses below its ``static_url`` folder
STATIC_REQUIRE_JS = "requirejs/require.js"
STATIC_RENDERER = "html-manager/embed-amd.js"

_WHAT = {bundle.REQUIRE_JS: "require.js", bundle.RENDERER_GZ: "the widget renderer (html-manager/embed-amd.js)"}
FIX = ("install labkit from a wheel built with its page assets (scripts/wheelhouse.sh, or `pip wheel .` "
       "in a checkout after `npm ci`), or run `npm ci` in the labkit checkout")


class MissingAssetError(UsageError):
    """An asset a page needs is in neither the package nor ``node_modules`` (one line, with the fix)."""


def _locate(name: str) -> tuple[Path, bool] | None:
    """``(path, compressed)`` of asset ``name`` (a name in :mod:`bundle`), or None."""
    from labkit.results import REPO_ROOT

    source = {bundle.REQUIRE_JS: bundle.REQUIRE_JS_SOURCE, bundle.RENDERER_GZ: bundle.RENDERER_SOURCE}[name]
    env = os.environ.get(NODE_MODULES_ENV)
    if env:  # named explicitly: it comes first
        candidates = [(Path(env) / source, False), (PACKAGE_ASSETS / name, name.endswith(".gz"))]
    else:
        candidates = [(PACKAGE_ASSETS / name, name.endswith(".gz")), (REPO_ROOT / "node_modules" / source, False)]
    return next(((p, gz) for p, gz in candidates if p.is_file()), None)


def missing(with_renderer: bool = True) -> list[str]:
    """What a page would lack here: ``[]``, or the assets' descriptions."""
    names = [bundle.REQUIRE_JS] + ([bundle.RENDERER_GZ] if with_renderer else [])
    return [_WHAT[n] for n in names if _locate(n) is None]


def check(with_renderer: bool = True) -> None:
    """Raise :class:`MissingAssetError` (one line naming the fix) unless every asset is found."""
    lacking = missing(with_renderer)
    if lacking:
        verb = "is" if len(lacking) == 1 else "are"
        raise MissingAssetError(f"{' and '.join(lacking)} {verb} missing from labkit's page assets: {FIX}")


@functools.lru_cache(maxsize=4)
def _read(path: str, compressed: bool, want_gzip: bool, _mtime: float) -> bytes:
    data = Path(path).read_bytes()
    if compressed and not want_gzip:
        return gzip.decompress(data)
    if want_gzip and not compressed:
        return bundle.gzip_bytes(data)
    return data


def _asset(name: str, want_gzip: bool) -> bytes:
    found = _locate(name)
    if found is None:
        check(with_renderer=name == bundle.RENDERER_GZ)
    path, compressed = found
    return _read(str(path), compressed, want_gzip, path.stat().st_mtime)


def require_js() -> bytes:
    """require.js's text (bytes)."""
    return _asset(bundle.REQUIRE_JS, want_gzip=False)


def renderer_gzip() -> bytes:
    """The widget renderer, gzip-compressed (what a single-file page inlines)."""
    return _asset(bundle.RENDERER_GZ, want_gzip=True)


def renderer_js() -> bytes:
    """The widget renderer's text (what a report's shared ``_static`` folder links)."""
    return _asset(bundle.RENDERER_GZ, want_gzip=False)


def vendor(static_dir: Path | str) -> list[Path]:
    """Write require.js and the renderer under ``static_dir`` (``STATIC_*`` names); return the files.

    Raises :class:`MissingAssetError` when either is missing.
    """
    from labkit.fileio import write_atomic

    check()
    static_dir = Path(static_dir)
    written = []
    for rel, data in ((STATIC_REQUIRE_JS, require_js()), (STATIC_RENDERER, renderer_js())):
        path = static_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
        written.append(path)
    return written
