"""pytest plugin: vLLM's own tests run with the A/B variant named by ``$LABKIT_VLLM_AB``.

vLLM's unit tests build schedulers and placeholders directly, so nothing in them starts an
engine process that would load vLLM's general plugins before the first test. This plugin
(``pytest -p labkit.vllm.pytest_ab``) calls vLLM's own loader,
``vllm.plugins.load_general_plugins()``, when pytest starts: it runs every entry point of the
``vllm.general_plugins`` group, among them labkit's ``labkit.vllm.ab:load_plugin``, which applies
the variant the environment names (nothing when the variable is unset: the stock run). The
plugin then checks that the variant the environment names is the one applied, stops the run
when it is not, and names it in pytest's header and in the junit XML's properties.
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
