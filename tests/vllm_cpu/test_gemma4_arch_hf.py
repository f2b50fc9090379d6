"""The device model's Gemma-4-E4B shapes against transformers' own Gemma 4 (built on the meta device).

transformers' ``Gemma4ForConditionalGeneration`` is built from E4B's published values with no
weights allocated; its matrices per layer, its KV-sharing layers and its image processor's output
are compared with what :mod:`labkit.facts` and :mod:`labkit.gpu.device_model` count.
Runs in vLLM's CPU environment (transformers with Gemma 4 is installed there).
"""

from __future__ import annotations

import re

import pytest

from labkit.gpu.device_model import ENCODER_PATCHES, PR40143_REAL_PATCHES, PR40143_SOFT_TOKENS
from labkit.facts import GEMMA4_E4B as A

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def hf_model():
    from transformers import Gemma4Config
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ForConditionalGeneration

    v = A.vision
    text = dict(num_hidden_layers=A.num_layers, hidden_size=A.hidden_size, num_attention_heads=A.num_heads,
                num_key_value_heads=A.num_kv_heads, head_dim=A.head_dim, global_head_dim=A.global_head_dim,
                sliding_window=A.sliding_window, layer_types=list(A.layer_types),
                num_kv_shared_layers=A.num_kv_shared_layers, intermediate_size=A.intermediate_size,
                vocab_size=A.vocab_size, vocab_size_per_layer_input=A.vocab_size_per_layer_input,
                hidden_size_per_layer_input=A.hidden_size_per_layer_input, tie_word_embeddings=A.tie_word_embeddings,
                use_double_wide_mlp=A.use_double_wide_mlp, attention_k_eq_v=False)
    vision = dict(num_hidden_layers=v.num_layers, hidden_size=v.hidden_size, intermediate_size=v.intermediate_size,
                  num_attention_heads=v.num_heads, num_key_value_heads=v.num_kv_heads, head_dim=v.head_dim,
                  patch_size=v.patch_size, pooling_kernel_size=v.pooling_kernel_size,
                  default_output_length=v.max_soft_tokens, position_embedding_size=v.position_embedding_size)
    cfg = Gemma4Config(text_config=text, vision_config=vision, audio_config=None)
    with torch.device("meta"):
        return Gemma4ForConditionalGeneration(cfg)


def _matrices(model, pattern: str) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and re.search(pattern, n))


def test_decoder_matrices_match(hf_model):
    for i in range(A.num_layers):
        assert _matrices(hf_model, rf"language_model\.layers\.{i}\.") == A.layer_params(i), f"layer {i}"
    assert _matrices(hf_model, r"per_layer_model_projection") == A.ple_projection_params
    assert hf_model.lm_head.weight is hf_model.model.language_model.embed_tokens.weight
    assert hf_model.lm_head.weight.numel() == A.lm_head_params
    # the PLE table is gathered per token: one row of num_layers x 256 per vocabulary entry
    table = hf_model.model.language_model.embed_tokens_per_layer.weight
    assert tuple(table.shape) == (A.vocab_size_per_layer_input, A.embedding_row_elements - A.hidden_size)


def test_kv_sharing_matches(hf_model):
    layers = hf_model.model.language_model.layers
    shared = [i for i, layer in enumerate(layers) if layer.self_attn.is_kv_shared_layer]
    assert shared == list(range(A.first_kv_shared_layer, A.num_layers))
    stores = {i for i, layer in enumerate(layers) if layer.self_attn.store_full_length_kv}
    assert stores == {A.kv_owner(i) for i in shared}
    for i in shared:
        assert layers[A.kv_owner(i)].self_attn.layer_type == layers[i].self_attn.layer_type


def test_vision_matrices_match(hf_model):
    v = A.vision
    for i in range(v.num_layers):
        assert _matrices(hf_model, rf"vision_tower\.encoder\.layers\.{i}\.") == v.layer_params
    assert _matrices(hf_model, r"patch_embedder\.input_proj") == v.patch_embed_params
    assert _matrices(hf_model, r"embed_vision\.embedding_projection") == v.projection_params(A.hidden_size)


def test_the_processor_pads_a_pr40143_image():
    from PIL import Image
    from transformers.models.gemma4 import Gemma4ImageProcessorPil

    v = A.vision
    proc = Gemma4ImageProcessorPil(patch_size=v.patch_size, max_soft_tokens=v.max_soft_tokens,
                                   pooling_kernel_size=v.pooling_kernel_size)
    out = proc(images=[Image.new("RGB", (1536, 1024))], return_tensors="np")
    assert out["pixel_values"].shape[1] == ENCODER_PATCHES
    assert int((out["image_position_ids"] != -1).all(-1).sum()) == PR40143_REAL_PATCHES
    assert int(out["num_soft_tokens_per_image"][0]) == PR40143_SOFT_TOKENS
