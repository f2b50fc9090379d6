"""The offline install path's pieces that need no network: the `report` extra covers what the
report and the notebooks import, and wheelhouse.sh / setup_venv.sh answer bad input with one
line and exit 2. The whole path (download, offline set-up, a notebook) is `make offline-check`,
which CI runs after `make test`."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = ROOT / "scripts" / "wheelhouse.sh"
SETUP = ROOT / "scripts" / "setup_venv.sh"

#: import name -> distribution, where they differ
DIST_OF = {"IPython": "ipython", "yaml": "pyyaml", "jinja2": "jinja2"}
#: what the node brings (the compute stack) and optional imports behind a try/except
NOT_IN_REPORT = {"torch", "triton", "numpy", "vllm", "hta", "playwright", "pytest", "hypothesis"}
#: dependencies of the report extra's own packages that the lab may import directly
#: (the package named here requires them, so they are always in the wheelhouse)
PULLED_IN = {"ipython": "ipykernel", "jinja2": "nbconvert", "jupyter_client": "nbclient", "traitlets": "nbclient"}


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~\[;]", req.strip(), maxsplit=1)[0].lower()


def _imports_in(tree) -> set[str]:
    """Top-level module names of every absolute import under the AST node ``tree``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def _top_level_imports(paths) -> set[str]:
    found: set[str] = set()
    for path in paths:
        found |= _imports_in(ast.parse(path.read_text(), filename=str(path)))
    return found


def test_notebook_extra_builds_on_report():
    extras = _extras()
    assert "labkit[report]" in extras["notebook"]
    report = {_name(r) for r in extras["report"]}
    # the interactive and dev-only tools stay out of the offline set
    assert not report & {"jupyterlab", "playwright", "traceinsight", "torch-tb-profiler", "papermill"}


def test_report_extra_covers_what_the_report_and_notebooks_import():
    sources = [*(ROOT / "notebooks").glob("[0-9][0-9]_*.py"), *(ROOT / "labkit" / "report").glob("*.py"),
               *(ROOT / "labkit" / "viz").rglob("*.py"), *(ROOT / "labkit" / "widgets").glob("*.py")]
    third_party = {m for m in _top_level_imports(sources)
                   if m not in sys.stdlib_module_names and m != "labkit" and m != "__future__"}
    report = {_name(r) for r in _extras()["report"]}
    missing = []
    for module in sorted(third_party):
        dist = DIST_OF.get(module, module).lower()
        if dist in NOT_IN_REPORT or dist in report or PULLED_IN.get(dist) in report:
            continue
        missing.append(module)
    assert not missing, f"imported by the report or notebooks but not in the report extra: {missing}"
    assert {"nbclient", "nbconvert", "nbformat", "jupytext", "ipykernel", "plotly", "ipywidgets", "pandas"} <= report


def _run(script: Path, *args, **env) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=full, timeout=60)


def _one_line_exit_2(run: subprocess.CompletedProcess) -> None:
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert run.stderr.strip().count("\n") == 0 and run.stderr.strip(), run.stderr
    assert "Traceback" not in run.stderr


def test_wheelhouse_bad_input(tmp_path):
    _one_line_exit_2(_run(WHEELHOUSE))
    _one_line_exit_2(_run(WHEELHOUSE, "--out"))
    _one_line_exit_2(_run(WHEELHOUSE, "--out", str(tmp_path / "w"), "--python", "3"))
    _one_line_exit_2(_run(WHEELHOUSE, "--out", str(tmp_path / "w"), "--platform", "many linux"))
    _one_line_exit_2(_run(WHEELHOUSE, "--out", str(tmp_path / "w"), "--frobnicate"))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    _one_line_exit_2(_run(WHEELHOUSE, "--out", str(a_file)))
    _one_line_exit_2(_run(WHEELHOUSE, "--out", str(tmp_path / "w"), PYTHON=str(tmp_path / "no-python")))
    assert not (tmp_path / "w").exists()


def test_wheelhouse_help_names_the_options():
    run = _run(WHEELHOUSE, "--help")
    assert run.returncode == 0
    for opt in ("--out", "--python", "--platform", "--with-base"):
        assert opt in run.stdout


def test_offline_setup_bad_input(tmp_path):
    venv = str(tmp_path / "venv")
    _one_line_exit_2(_run(SETUP, LABKIT_WHEELHOUSE=str(tmp_path / "missing"), VENV=venv))
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_line_exit_2(_run(SETUP, LABKIT_WHEELHOUSE=str(empty), VENV=venv))
    (empty / "labkit-0.1.0-py3-none-any.whl").write_bytes(b"")
    # an interpreter without torch: the offline set-up keeps the node's torch, so it refuses
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text("#!/bin/sh\nexit 1\n")
    no_torch.chmod(0o755)
    run = _run(SETUP, LABKIT_WHEELHOUSE=str(empty), VENV=venv, PYTHON=str(no_torch))
    _one_line_exit_2(run)
    assert "torch" in run.stderr
    assert not Path(venv).exists()


def test_wheelhouse_carries_pytest_for_the_gpu_tests():
    """The GPU check runs the GPU tests on a node without pytest: the wheelhouse brings the dev
    extra's pytest (its dependencies come with it)."""
    run = _run(WHEELHOUSE, "--print-requirements")
    assert run.returncode == 0, run.stderr
    reqs = run.stdout.split()
    dev_pytest = [r for r in _extras()["dev"] if _name(r) == "pytest"]
    assert dev_pytest and dev_pytest[0].replace(" ", "") in reqs
    assert {_name(r) for r in _extras()["report"]} <= {_name(r) for r in reqs}
    assert not {_name(r) for r in reqs} & {"torch", "triton", "numpy", "playwright", "hypothesis"}


def _imports_run_by_gpu_tests(path: Path, *, every_test: bool) -> set[str]:
    """Modules ``path`` imports at its top and inside the tests the GPU check runs there (those
    marked ``gpu``, or every one when ``every_test``)."""
    out: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= _imports_in(node)
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            if every_test or any("gpu" in ast.unparse(d) for d in node.decorator_list):
                out |= _imports_in(node)
    return out


def test_gpu_tests_import_only_what_the_node_and_the_wheelhouse_bring():
    """Every module the GPU check's tests import (at collection or inside a test it runs) is the
    standard library, labkit, the node's compute stack, or in the wheelhouse (pytest, the report extra)."""
    gpu_files = [p for p in (ROOT / "tests").glob("test_*.py") if "mark.gpu" in p.read_text()]
    imported = set()
    for path in gpu_files:
        imported |= _imports_run_by_gpu_tests(path, every_test=False)
    imported |= _imports_run_by_gpu_tests(ROOT / "tests" / "test_prefix_attention.py", every_test=True)
    imported |= _imports_run_by_gpu_tests(ROOT / "tests" / "conftest.py", every_test=False)
    # the suite's own helper modules travel with the checkout: what they import counts instead
    helpers = {p.stem: p for p in (ROOT / "tests").glob("*.py") if not p.name.startswith("test_")}
    seen: set[str] = set()
    while local := (imported & helpers.keys()) - seen:
        for name in local:
            imported |= _imports_run_by_gpu_tests(helpers[name], every_test=False)
        seen |= local
    imported -= helpers.keys()
    node = {"torch", "triton", "numpy", "pandas"}
    carried = {"pytest", "labkit", "__future__"} | {_name(r) for r in _extras()["report"]}
    assert len(gpu_files) >= 6
    assert {m for m in imported if m not in sys.stdlib_module_names} - node - carried == set()
