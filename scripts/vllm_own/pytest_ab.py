"""pytest plugin: vLLM's own tests run with the A/B variant named by ``$LABKIT_VLLM_AB``.

More: scripts/vllm_own/README.md.
"""

from __future__ import annotations

import os

import pytest

from labkit.vllm.variants import ENV_VAR

#: what a run without ``$LABKIT_VLLM_AB`` is called in reports
STOCK = "stock"


def _wanted() -> str:
    return os.environ.get(ENV_VAR, "").strip()


def pytest_configure(config) -> None:
    from vllm.plugins import load_general_plugins

    from labkit.vllm import ab

    load_general_plugins()
    wanted = _wanted()
    applied = ab.applied_variant()
    if (applied or "") != wanted:
        pytest.exit(f"{ENV_VAR}={wanted or '(unset)'} but the applied variant is {applied or 'none'}: "
                    "is labkit's vllm.general_plugins entry point installed?", returncode=2)
    config.stash[_KEY] = applied or STOCK


_KEY = pytest.StashKey[str]()


def pytest_report_header(config) -> str:
    return f"labkit vLLM A/B variant: {config.stash.get(_KEY, STOCK)} (applied through vllm.general_plugins)"


@pytest.fixture(autouse=True, scope="session")
def _labkit_variant_property(record_testsuite_property, pytestconfig):
    record_testsuite_property("labkit_vllm_ab", pytestconfig.stash.get(_KEY, STOCK))
