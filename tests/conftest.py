"""Shared test set-up: Triton interpreter on CPU, paths, an isolated results store, Chromium.

- ``TRITON_INTERPRET=1`` is set before any test module imports a kernel module when
  there is no GPU, so tests never depend on import order.
- The optional imports the report's processes skip (``labkit.report``) are skipped here too.
- ``tests/vllm_conformance/`` runs only in the vLLM environment
  (``LABKIT_VLLM_CONFORMANCE=1``, see ``make test-vllm``).
- ``tests/vllm_cpu/`` runs only in vLLM's CPU environment (``LABKIT_VLLM_CPU=1``, see
  ``make test-vllm-cpu``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from labkit.device import has_cuda
from labkit.report import skip_unused_imports

if not has_cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# the test processes start as the report's do: without an optional import that only costs time
# (jsonschema's rfc3987_syntax, see labkit.report; nbformat is imported by many tests)
skip_unused_imports()

REPO_ROOT = Path(__file__).resolve().parents[1]
# real GPU traces: the fixtures of tests/data, and the shared collection as extra cases where
# present (tests/real_traces.py says where each is looked for)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]

#: the test files that take longest (a whole report build, the GPU script's dry run): run first, so a
#: parallel run (``make test``: pytest-xdist, one file per worker at a time) does not end waiting on one
LONGEST_FIRST = ("test_report_browser.py", "test_gpu_check.py")
#: the longest tests of those files, first in their file: pytest-xdist queues another file on a worker
#: once two or fewer of its tests are left, and that file would wait behind a long test run last
LONGEST_TESTS_FIRST = ("test_gpu_check_dry_run_on_cpu_packs_and_ingests", "test_lab_report_builds",
                       "test_lab_report_pages_render_offline")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    first = {name: i for i, name in enumerate(LONGEST_TESTS_FIRST)}
    # stable: file order, and test order within a file, kept otherwise
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), first.get(item.originalname, len(first))))


collect_ignore_glob: list[str] = []
if os.environ.get("LABKIT_VLLM_CONFORMANCE") != "1":
    collect_ignore_glob += ["vllm_conformance", "vllm_conformance/*"]
if os.environ.get("LABKIT_VLLM_CPU") != "1":
    collect_ignore_glob += ["vllm_cpu", "vllm_cpu/*"]


@pytest.fixture(autouse=True)
def _no_unit_costs_kept_across_tests(monkeypatch):
    """A test that runs a notebook's set-up in-process does not make every later result keep unit costs."""
    import labkit.results

    monkeypatch.setattr(labkit.results, "_KEEP_UNIT_COSTS", False)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def results_store(tmp_path, monkeypatch) -> Path:
    """An empty results store for one test (``LABKIT_RESULTS`` points at it)."""
    root = tmp_path / "results"
    monkeypatch.setenv("LABKIT_RESULTS", str(root))
    return root


def chromium_skip_reason() -> str | None:
    """Why browser tests cannot run here, or None when Chromium is available."""
    if os.path.exists(CHROMIUM) or shutil.which("chromium"):
        return None
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed"
    if os.geteuid() != 0:
        return "Debian's chromium is not installed and we are not root (make test installs it)"
    return None  # root without chromium: the browser test fails loudly (make test installs it)


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium driven by Playwright (Debian's /usr/bin/chromium, offline flags)."""
    reason = chromium_skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:  # Playwright gives each launch a fresh, empty profile
        exe = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
