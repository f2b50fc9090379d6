"""The published run's prompts, as ``vllm bench serve`` made them."""

from __future__ import annotations

import pytest

from labkit.errors import UsageError
from labkit.vllm.serving import get_workload, prompt_layout


def test_full_prompt_layout():
    w = get_workload("full")
    assert (w.requests, w.images, w.text_tokens, w.output_tokens) == (128, 32, 1024, 8000)
    total, spans = prompt_layout(w)
    # 1,024 text tokens in 33 runs (31 each, the first 32) around 32 placeholders of 262
    assert total == 1024 + 32 * 262
    assert spans[0].offset == 32 and spans[1].offset == 32 + 262 + 31
    assert all(s.length == 262 and s.num_embeds == 260 and not s.is_embed[0] and not s.is_embed[-1] for s in spans)
    assert total - (spans[-1].offset + spans[-1].length) == 31


def test_an_unknown_size_is_a_usage_error():
    with pytest.raises(UsageError):
        get_workload("huge")
