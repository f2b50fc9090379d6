"""Gemma-4-E4B's architecture as numbers: the shapes a device model counts bytes and FLOPs from.

:data:`GEMMA4_E4B` is the model of vLLM #40143's benchmark (``google/gemma-4-E4B-it``), with the
field names of transformers' ``Gemma4TextConfig`` / ``Gemma4VisionConfig``; every value comes
from a published E4B configuration, not from those classes' defaults.

More: docs/reference.md, ``labkit.serve.gpu.gemma4_arch``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from labkit.errors import UsageError

__all__ = ["VisionTower", "Gemma4Arch", "AttentionGroup", "GEMMA4_E4B", "SLIDING", "GLOBAL"]

SLIDING = "sliding_attention"
GLOBAL = "full_attention"


@dataclass(frozen=True)
class VisionTower:
    """The vision encoder: a bidirectional transformer over an image's patches, then 3x3 pooling."""

    num_layers: int = 16
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_heads: int = 12
    num_kv_heads: int = 12
    head_dim: int = 64
    patch_size: int = 16
    pooling_kernel_size: int = 3
    max_soft_tokens: int = 280
    channels: int = 3
    position_embedding_size: int = 10240

    @property
    def max_patches(self) -> int:
        """Patches the processor pads every image to (``max_soft_tokens x pooling^2``)."""
        return self.max_soft_tokens * self.pooling_kernel_size ** 2

    @property
    def layer_params(self) -> int:
        """Matrix elements of one encoder layer: q, k, v, o and the gated MLP (gate, up, down)."""
        h = self.hidden_size
        attn = h * self.num_heads * self.head_dim * 2 + h * self.num_kv_heads * self.head_dim * 2
        return attn + 3 * h * self.intermediate_size

    @property
    def patch_embed_params(self) -> int:
        """The patch embedder's matrix: ``channels x patch^2 -> hidden``."""
        return self.channels * self.patch_size ** 2 * self.hidden_size

    def projection_params(self, text_hidden: int) -> int:
        """The embedder into the text model: ``hidden -> text_hidden``."""
        return self.hidden_size * text_hidden

    def streamed_params(self, text_hidden: int) -> int:
        """Matrix elements read once per step that encodes images (position table excluded: looked up)."""
        return self.num_layers * self.layer_params + self.patch_embed_params + self.projection_params(text_hidden)


@dataclass(frozen=True)
class AttentionGroup:
    """Decoder layers of one attention type: how many read a cache, how many own one, and their shapes."""

    layer_type: str
    reading_layers: int
    owning_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    window: int  # tokens; 0 = the whole context

    def kv_bytes_per_token(self, element_bytes: int) -> int:
        """K and V of one token in one layer's cache."""
        return 2 * self.num_kv_heads * self.head_dim * element_bytes


@dataclass(frozen=True)
class Gemma4Arch:
    """A Gemma 4 text decoder and vision tower (element counts; ``sliding_window`` in tokens)."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    global_head_dim: int
    num_global_kv_heads: int
    sliding_window: int
    layer_types: tuple[str, ...]
    num_kv_shared_layers: int
    intermediate_size: int
    use_double_wide_mlp: bool
    vocab_size: int
    vocab_size_per_layer_input: int
    hidden_size_per_layer_input: int
    tie_word_embeddings: bool
    vision: VisionTower = field(default_factory=VisionTower)
    element_bytes: int = 2  # bf16 weights and KV cache

    def __post_init__(self) -> None:
        if len(self.layer_types) != self.num_layers:
            raise UsageError(f"{self.name}: {len(self.layer_types)} layer types for {self.num_layers} layers")
        if set(self.layer_types) - {SLIDING, GLOBAL}:
            raise UsageError(f"{self.name}: layer types must be {SLIDING!r} or {GLOBAL!r}")
        if not 0 <= self.num_kv_shared_layers < self.num_layers:
            raise UsageError(f"{self.name}: num_kv_shared_layers must be in [0, num_layers)")
        for key in ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "global_head_dim",
                    "num_global_kv_heads", "intermediate_size", "vocab_size", "element_bytes"):
            if getattr(self, key) < 1:
                raise UsageError(f"{self.name}: {key} must be >= 1")
        for i in range(self.first_kv_shared_layer, self.num_layers):
            self.kv_owner(i)  # every shared layer needs an owner of its type

    # -- layers -------------------------------------------------------------------------------
    @property
    def first_kv_shared_layer(self) -> int:
        return self.num_layers - self.num_kv_shared_layers

    def is_sliding(self, layer: int) -> bool:
        return self.layer_types[layer] == SLIDING

    def kv_owner(self, layer: int) -> int:
        """The layer whose cache ``layer`` reads: itself, or the last non-shared layer of its type."""
        first = self.first_kv_shared_layer
        if layer < first:
            return layer
        kind = self.layer_types[layer]
        for j in range(first - 1, -1, -1):
            if self.layer_types[j] == kind:
                return j
        raise UsageError(f"{self.name}: shared layer {layer} has no earlier {kind} layer to read")

    def layer_head_dim(self, layer: int) -> int:
        return self.head_dim if self.is_sliding(layer) else self.global_head_dim

    def layer_kv_heads(self, layer: int) -> int:
        return self.num_kv_heads if self.is_sliding(layer) else self.num_global_kv_heads

    def layer_intermediate(self, layer: int) -> int:
        double = self.use_double_wide_mlp and layer >= self.first_kv_shared_layer > 0
        return self.intermediate_size * (2 if double else 1)

    def layer_params(self, layer: int) -> int:
        """Matrix elements of decoder layer ``layer``: attention, MLP and its two PLE matrices.

        A KV-shared layer has ``q_proj`` and ``o_proj`` only (no ``k_proj``/``v_proj``).
        """
        h, hd = self.hidden_size, self.layer_head_dim(layer)
        q_and_o = 2 * h * self.num_heads * hd
        k_and_v = 0 if layer >= self.first_kv_shared_layer else 2 * h * self.layer_kv_heads(layer) * hd
        mlp = 3 * h * self.layer_intermediate(layer)
        ple = 2 * h * self.hidden_size_per_layer_input
        return q_and_o + k_and_v + mlp + ple

    # -- whole-model counts -------------------------------------------------------------------
    @property
    def ple_projection_params(self) -> int:
        """``per_layer_model_projection``: hidden -> ``num_layers x hidden_size_per_layer_input``."""
        return self.hidden_size * self.num_layers * self.hidden_size_per_layer_input

    @functools.cached_property
    def decoder_params(self) -> int:
        """Matrix elements streamed by every step's decoder GEMMs (layers + the PLE projection)."""
        return sum(self.layer_params(i) for i in range(self.num_layers)) + self.ple_projection_params

    @property
    def lm_head_params(self) -> int:
        """The LM head's matrix (the token embedding when tied): ``vocab x hidden``."""
        return self.vocab_size * self.hidden_size

    @property
    def embedding_row_elements(self) -> int:
        """Elements gathered per token: its embedding row and its PLE row (``num_layers x 256``)."""
        return self.hidden_size + self.num_layers * self.hidden_size_per_layer_input

    @functools.cached_property
    def attention_groups(self) -> tuple[AttentionGroup, ...]:
        """One group per attention type present (sliding first): the layers reading and owning caches."""
        groups = []
        for kind in (SLIDING, GLOBAL):
            layers = [i for i, t in enumerate(self.layer_types) if t == kind]
            if not layers:
                continue
            owners = sum(1 for i in layers if self.kv_owner(i) == i)
            sliding = kind == SLIDING
            groups.append(AttentionGroup(
                layer_type=kind, reading_layers=len(layers), owning_layers=owners, num_heads=self.num_heads,
                num_kv_heads=self.num_kv_heads if sliding else self.num_global_kv_heads,
                head_dim=self.head_dim if sliding else self.global_head_dim,
                window=self.sliding_window if sliding else 0))
        return tuple(groups)

    @property
    def kv_write_bytes_per_token(self) -> int:
        """K and V one new token writes, over the layers that own a cache."""
        return sum(g.owning_layers * g.kv_bytes_per_token(self.element_bytes) for g in self.attention_groups)


def _e4b_layer_types() -> tuple[str, ...]:
    return tuple(GLOBAL if i % 6 == 5 else SLIDING for i in range(42))


#: Gemma-4-E4B (``google/gemma-4-E4B-it``); sources in docs/reference.md, ``labkit.serve.gpu.gemma4_arch``
GEMMA4_E4B = Gemma4Arch(
    name="gemma-4-E4B",
    num_layers=42, hidden_size=2560, num_heads=8, num_kv_heads=2, head_dim=256, global_head_dim=512,
    num_global_kv_heads=2, sliding_window=512, layer_types=_e4b_layer_types(), num_kv_shared_layers=18,
    intermediate_size=10240, use_double_wide_mlp=False, vocab_size=262144, vocab_size_per_layer_input=262144,
    hidden_size_per_layer_input=256, tie_word_embeddings=True, vision=VisionTower(),
)
