"""Set-up for the vLLM conformance suite (runs in .venv-vllm via ``bash scripts/test_vllm.sh``).

vLLM's CPU import and its Triton kernels need the GPU hidden and the Triton interpreter
on *before* vLLM or any kernel module is imported, so both are set here, at collection.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is not None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="session")
def vllm_version() -> str:
    vllm = pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm.sh)")
    return vllm.__version__
