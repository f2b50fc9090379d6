"""``labkit bench serve-sim``'s refusals: one line on stderr and exit 2, before any work."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from labkit.serve.bench import main
from labkit.serve.device import load_device_model


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_one_line_and_exit_2(capsys):
    assert main(["--size", "quick", "--no-save"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vLLM is not installed" in err[0]


def test_bad_arms_exit_2(capsys):
    assert main(["--arms", "baseline,nope", "--no-save"]) == 2
    assert "--arms" in capsys.readouterr().err


def test_no_device_model_is_said_not_made_up(monkeypatch):
    monkeypatch.setitem(sys.modules, "labkit.serve.gpu.device_model", None)  # import fails
    device, why = load_device_model("h200")
    assert device is None and "no device model" in why


def test_device_model_adapter_counts_the_new_token():
    pytest.importorskip("labkit.serve.gpu.device_model")
    from labkit.serve.gpu import device_model as dm
    from labkit.serve.gpu.gemma4_arch import GEMMA4_E4B

    device, why = load_device_model("h200")
    assert "simulated" in why
    expected = dm.step_device_time(GEMMA4_E4B, "h200", dm.StepBatch(decode_contexts=(101, 201),
                                                                   prefill_chunks=(dm.PrefillChunk(50, 0, True),),
                                                                   images_encoded=1)).total_ns
    assert device((100, 200), ((50, 0, True),), 1) == pytest.approx(expected)
