"""Builders of real vLLM objects for the conformance tests (offline: no model config).

Imported only by test modules that already did ``pytest.importorskip("vllm")``.
"""

from __future__ import annotations


from vllm import SamplingParams
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.v1.request import Request as VllmRequest

from labkit.vllm.census.prefix_ranges_patch import random_mask  # noqa: F401  (the shared random-mask generator)


def vllm_feature(identifier: str, pos: PlaceholderRange, modality: str = "image") -> MultiModalFeatureSpec:
    return MultiModalFeatureSpec(data=None, modality=modality, identifier=identifier, mm_position=pos)


def vllm_request(request_id: str, prompt_len: int, features: list) -> VllmRequest:
    """A real vLLM ``Request`` (no model config, no tokenizer: token ids are zeros)."""
    return VllmRequest(
        request_id=request_id,
        prompt_token_ids=[0] * prompt_len,
        sampling_params=SamplingParams(max_tokens=4),
        pooling_params=None,
        mm_features=features,
    )
