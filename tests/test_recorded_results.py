"""Every committed result file: readable, provenance fields coherent, quantiles ordered, filed under its size.

Schema and internal consistency only: no test here knows what a recorded number is.
"""

from __future__ import annotations

import json
import subprocess
import warnings

import pytest

from labkit.results import QUICK_SUFFIX, REPO_ROOT, SIZES, base_name, parse_result

RESULTS = REPO_ROOT / "data" / "results"
FILES = sorted(RESULTS.glob("*/*.json"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_result_is_valid_and_coherent(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = parse_result(data, str(path))
    assert res.name == path.stem and res.slug == path.parent.name
    assert res.rows and res.created
    assert res.complete, f"{path.name} holds the rows of a run that did not finish"
    for row in res.rows:
        if {"p20_ns", "median_ns", "p80_ns"} <= row.keys() and row["median_ns"] is not None:
            assert row["p20_ns"] <= row["median_ns"] <= row["p80_ns"], row
    # filed under its size: a quick run is <name>_quick, whether the size is a top-level field or
    # (in files older than it) only in the params; files that record no size at all say so on
    # every page that shows them (provenance: "size UNKNOWN")
    if res.size in SIZES:
        assert res.name.endswith(QUICK_SUFFIX) == (res.size == "quick"), f"a {res.size} run filed as {res.name}"
    if "size" in data:
        assert data["size"] in SIZES and "labkit_commit" in data and "command" in data


def _committed_results() -> list[str]:
    try:
        return subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "data/results"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout")


def test_quick_results_are_committed_only_as_a_gpu_machines_only_recording():
    listed = _committed_results()
    quick = [f for f in listed if f.endswith(QUICK_SUFFIX + ".json")]
    for f in quick:
        data = json.loads((REPO_ROOT / f).read_text(encoding="utf-8"))
        assert data["source"] == "measured-gpu", f"{f}: a quick run of a CPU machine is never committed"
        full = f.rsplit("/", 1)[0] + "/" + base_name(data["name"]) + ".json"
        assert full not in listed, f"{f}: the full recording {full} replaces it"
