"""Builders of real vLLM objects for the conformance tests (offline: no model config).

Imported only by test modules that already did ``pytest.importorskip("vllm")``.
"""

from __future__ import annotations

import random

import torch
from vllm import SamplingParams
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.v1.request import Request as VllmRequest


def random_mask(rng: random.Random, length: int) -> torch.Tensor | None:
    """None, all-False, all-True, Gemma-style, runs or random bits; bool ``(length,)``."""
    kind = rng.choice(("none", "false", "true", "gemma", "runs", "bits", "bits"))
    if kind == "none":
        return None
    if kind == "false":
        return torch.zeros(length, dtype=torch.bool)
    if kind == "true":
        return torch.ones(length, dtype=torch.bool)
    if kind == "gemma":
        m = torch.ones(length, dtype=torch.bool)
        if length:
            m[0] = False
            m[-1] = False
        return m
    if kind == "runs":
        flags, val = [], rng.random() < 0.5
        while len(flags) < length:
            flags += [val] * rng.randint(1, 5)
            val = not val
        return torch.tensor(flags[:length], dtype=torch.bool)
    return torch.tensor([rng.random() < 0.5 for _ in range(length)], dtype=torch.bool)


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
