"""The facts the lab takes from outside: GPU datasheets, #40143's published table, Gemma-4-E4B.

Numbers no measurement of the lab's makes, each with where it comes from. Read by the simulator,
the figures and the report alike, so they live here, below all of them.

- **GPU peaks** (``gpu_peaks.json`` beside this module): dense BF16 tensor-core TFLOP/s and memory
  TB/s per GPU, the memory, the regular expressions that recognise the name torch reports
  (``torch.cuda.get_device_name``; tried in table order, so ``H200 NVL`` before ``H200``) and the
  document each figure comes from. Datasheets quote BF16 "with sparsity" (2:4 structured); the table
  holds the dense figure, half of it, which is what an attention kernel can reach.
- **#40143's published table** (:data:`PR40143`): Gemma-4-E4B, 128 requests at concurrency 128, 32
  images of 1024x1536 each, 8,000 output tokens (``--ignore-eos``), ``vllm bench serve``: the
  figures of the PR's description, before and after. :func:`two_phases` derives from them alone
  the run's two phases (an arrival phase of few, long steps; then full-batch decode).
- **Gemma-4-E4B's architecture** (:data:`GEMMA4_E4B`): the model of #40143's benchmark
  (``google/gemma-4-E4B-it``) with the field names of transformers' ``Gemma4TextConfig`` /
  ``Gemma4VisionConfig``; every value comes from a published E4B configuration, not from those
  classes' defaults. The one model description: the device model counts bytes and FLOPs from it,
  the mini engine's ``gemma4-e4b-like`` preset takes its stack from it, the made Gemma 4 model
  takes its image rule (:meth:`VisionTower.soft_tokens`) from it.

More: docs/reference.md, ``labkit.facts``.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from labkit.errors import UsageError

__all__ = ["GpuPeak", "load_peaks", "peak_for", "Published", "PR40143", "ARMS", "METRICS", "two_phases",
           "VisionTower", "Gemma4Arch", "AttentionGroup", "GEMMA4_E4B", "SLIDING", "GLOBAL"]


# -- GPU peaks ------------------------------------------------------------------------------------
#: the GPU peak table
TABLE = Path(__file__).resolve().parent / "gpu_peaks.json"


@dataclass(frozen=True)
class GpuPeak:
    """One GPU's peaks: ``bf16_dense_tflops`` (1e12 FLOP/s), ``mem_tb_s`` (1e12 bytes/s), and their ``source``."""

    name: str
    bf16_dense_tflops: float
    mem_tb_s: float
    memory: str
    source: str
    match: tuple[str, ...]

    @property
    def ridge_flop_per_byte(self) -> float:
        """The ridge point: the arithmetic intensity (FLOP/byte) where memory and compute bounds meet."""
        return self.bf16_dense_tflops / self.mem_tb_s

    def attainable_tflops(self, flop_per_byte: float) -> float:
        """The roof at ``flop_per_byte``: ``min(peak compute, intensity x peak bandwidth)`` in TFLOP/s."""
        return min(self.bf16_dense_tflops, flop_per_byte * self.mem_tb_s)


@functools.lru_cache(maxsize=2)
def load_peaks(path: Path | str = TABLE) -> tuple[GpuPeak, ...]:
    """Every entry of the peak table, in table order."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return tuple(GpuPeak(name=g["name"], bf16_dense_tflops=float(g["bf16_dense_tflops"]),
                         mem_tb_s=float(g["mem_tb_s"]), memory=str(g.get("memory", "")), source=str(g["source"]),
                         match=tuple(g["match"])) for g in data["gpus"])


def peak_for(gpu_name: str | None, peaks: tuple[GpuPeak, ...] | None = None) -> GpuPeak | None:
    """The table entry for a GPU as torch names it (``"NVIDIA H200"``), or None when none matches."""
    if not gpu_name:
        return None
    return next((peak for peak in (peaks if peaks is not None else load_peaks())
                 if any(re.search(p, gpu_name, re.I) for p in peak.match)), None)


# -- #40143's published table --------------------------------------------------------------------
#: the lab's A/B arm -> side of the published table
ARMS = {"baseline": "before", "pr40143": "after"}
#: the table's metrics the lab predicts, with their units
METRICS = {"peak_output_tok_s": "tok/s", "output_tok_s": "tok/s", "mean_tpot_ms": "ms", "mean_ttft_s": "s",
           "duration_s": "s"}


@dataclass(frozen=True)
class Published:
    """One side of the table."""

    output_tok_s: float
    peak_output_tok_s: float
    mean_tpot_ms: float
    mean_ttft_s: float
    duration_s: float

    def get(self, metric: str) -> float:
        return float(getattr(self, metric))


@dataclass(frozen=True)
class _Table:
    name: str
    requests: int
    images: int
    image_size: str
    output_tokens: int
    before: Published
    after: Published

    def side(self, arm: str) -> Published:
        """The published side of a lab arm (``baseline`` -> before, ``pr40143`` -> after)."""
        return self.before if ARMS.get(arm, arm) == "before" else self.after

    @property
    def throughput_gain(self) -> float:
        return self.after.output_tok_s / self.before.output_tok_s


PR40143 = _Table(
    name="vllm#40143 Gemma-4-E4B c=128 x 32 images", requests=128, images=32, image_size="1024x1536",
    output_tokens=8000,
    before=Published(output_tok_s=2478.5, peak_output_tok_s=6158.0, mean_tpot_ms=33.81, mean_ttft_s=137.9,
                     duration_s=413.16),
    after=Published(output_tok_s=3146.8, peak_output_tok_s=9088.0, mean_tpot_ms=24.58, mean_ttft_s=124.3,
                    duration_s=325.41),
)


def two_phases(side: Published, requests: int = PR40143.requests, output_tokens: int = PR40143.output_tokens) -> dict:
    """What one side's figures say about its run, by arithmetic alone.

    ``output_tokens_total``: tok/s x duration (= requests x output tokens when the figures hold);
    ``mean_e2el_s``: mean TTFT + (output tokens - 1) x mean TPOT; ``finish_spread_s``: duration
    less the mean E2EL (how long before the last request the average one finished);
    ``fastest_step_ms``: one full-batch step at the peak (requests / peak tok/s);
    ``spread_steps``: the finish spread in such steps (the average request got its first token
    about that many steps before the last one did, each running request decoding one token a
    step); ``arrival_s``: the arrival phase, up to the average first token (= mean TTFT);
    ``decode_s``: the rest of the run; ``decode_step_ms``: its mean step (= mean TPOT up to the
    spread).
    """
    e2el = side.mean_ttft_s + (output_tokens - 1) * side.mean_tpot_ms / 1e3
    spread = side.duration_s - e2el
    fastest = requests / side.peak_output_tok_s * 1e3
    decode = side.duration_s - side.mean_ttft_s
    return {"output_tokens_total": side.output_tok_s * side.duration_s, "mean_e2el_s": e2el, "finish_spread_s": spread,
            "fastest_step_ms": fastest, "spread_steps": spread / fastest * 1e3, "arrival_s": side.mean_ttft_s,
            "decode_s": decode, "decode_step_ms": (decode - spread) / (output_tokens - 1) * 1e3}


# -- Gemma-4-E4B ---------------------------------------------------------------------------------
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

    def soft_tokens(self, width: int, height: int) -> int:
        """Soft tokens of one ``width x height`` image: the processor resizes it, keeping its aspect,
        to sides that are multiples of patch x pooling within ``max_soft_tokens x pooling^2``
        patches; one soft token per pooled cell."""
        if width < 1 or height < 1:
            raise UsageError(f"image size must be positive, got {width} x {height}")
        patch, pool, budget = self.patch_size, self.pooling_kernel_size, self.max_soft_tokens
        unit = patch * pool
        scale = math.sqrt(budget * pool * pool / ((height / patch) * (width / patch)))
        target_h = max(unit, int(math.floor(height * scale / unit)) * unit)
        target_w = max(unit, int(math.floor(width * scale / unit)) * unit)
        return min((target_h // patch) * (target_w // patch) // (pool * pool), budget)

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


#: Gemma-4-E4B (``google/gemma-4-E4B-it``); sources in docs/reference.md, ``labkit.facts``
GEMMA4_E4B = Gemma4Arch(
    name="gemma-4-E4B",
    num_layers=42, hidden_size=2560, num_heads=8, num_kv_heads=2, head_dim=256, global_head_dim=512,
    num_global_kv_heads=2, sliding_window=512, num_kv_shared_layers=18,
    layer_types=tuple(GLOBAL if i % 6 == 5 else SLIDING for i in range(42)),
    intermediate_size=10240, use_double_wide_mlp=False, vocab_size=262144, vocab_size_per_layer_input=262144,
    hidden_size_per_layer_input=256, tie_word_embeddings=True, vision=VisionTower(),
)
