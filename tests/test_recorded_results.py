"""Every committed result file: readable, provenance fields coherent, quantiles ordered.

Schema and internal consistency only: no test here knows what a recorded number is.
"""

from __future__ import annotations

import json
import subprocess
import warnings

import pytest

from labkit.results import QUICK_SUFFIX, REPO_ROOT, SIZES, parse_result

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
    for row in res.rows:
        if {"p20_ns", "median_ns", "p80_ns"} <= row.keys() and row["median_ns"] is not None:
            assert row["p20_ns"] <= row["median_ns"] <= row["p80_ns"], row
    named_quick = res.name.endswith(QUICK_SUFFIX)
    if "size" in data:  # recorded with the top-level size field: it must be one and agree with the name
        assert data["size"] in SIZES and named_quick == (data["size"] == "quick"), (res.name, data["size"])
        assert "labkit_commit" in data and "command" in data
    elif res.size in SIZES and named_quick != (res.size == "quick"):
        pytest.xfail(f"recorded before results had a size field: a {res.size} run filed as {res.name}; re-record it")


def test_quick_results_are_never_committed():
    try:
        listed = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "data/results"], capture_output=True,
                                text=True, timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout")
    assert [f for f in listed if f.endswith(QUICK_SUFFIX + ".json")] == []
