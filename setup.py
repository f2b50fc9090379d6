"""Build step: the page assets (require.js, the widget renderer) from npm's files into the wheel.

Everything else is in pyproject.toml. Building a wheel (``pip wheel .``, ``python -m build``,
scripts/wheelhouse.sh) writes ``labkit/report/vendor/`` into it from ``$LABKIT_NODE_MODULES``
or the checkout's ``node_modules`` (``npm ci``), see labkit/report/bundle.py. Without them the
wheel still builds, says what it lacks, and its exports refuse with one line naming the fix.
An editable install (``pip install -e .``) reads the checkout's ``node_modules`` at export time.
"""

import importlib.util
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _bundle_module():
    # by path: labkit's own dependencies are not installed while it builds
    spec = importlib.util.spec_from_file_location("_labkit_bundle", HERE / "labkit" / "report" / "bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithPageAssets(build_py):
    """``build_py``, then the page assets into the build's ``labkit/report/vendor``."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        bundle = _bundle_module()
        node_modules = Path(os.environ.get("LABKIT_NODE_MODULES") or HERE / "node_modules")
        target = Path(self.build_lib) / "labkit" / "report" / "vendor"
        written = bundle.bundle_assets(node_modules, target)
        if written:
            print(f"labkit: page assets from {node_modules} -> {target}: {', '.join(written)}")
        elif (target / bundle.REQUIRE_JS).is_file() and (target / bundle.RENDERER_GZ).is_file():
            print(f"labkit: page assets kept from the sources ({target})")
        else:
            lacking = ", ".join(bundle.missing_sources(node_modules))
            print(f"labkit: WARNING: this wheel carries no page assets ({node_modules} lacks {lacking}; "
                  "run `npm ci` first): its page exports will refuse with a one-line message")


setup(cmdclass={"build_py": BuildWithPageAssets})
