"""How long one engine step of Gemma 4 takes on a GPU: a roofline per part, summed (simulated).

More: docs/reference.md, ``labkit.gpu.device_model``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from labkit.errors import UsageError
from labkit.gpu.device_efficiency import Efficiencies, load_efficiencies
from labkit.facts import GEMMA4_E4B, SLIDING, Gemma4Arch, GpuPeak, load_peaks
from labkit.step_model import StepShape

__all__ = ["GPUS", "get_gpu", "full_batch_device_ns", "describe_device", "PrefillChunk", "PartTime", "DeviceTime", "step_device_time",
           "decode_step_ms", "describe", "PR40143_SOFT_TOKENS", "PR40143_REAL_PATCHES", "ENCODER_PATCHES",
           "STEP_FLOOR_ORIGIN", "SOURCE"]

SOURCE = "simulated"
#: the peak-table entries (:mod:`labkit.facts`) of the two GPUs
_GPU_TABLE_NAMES = {"h100": "H100 SXM", "h200": "H200 SXM"}
#: soft tokens of one of #40143's 1024 x 1536 images, and the real patches behind them
PR40143_SOFT_TOKENS = GEMMA4_E4B.vision.soft_tokens(1024, 1536)
PR40143_REAL_PATCHES = PR40143_SOFT_TOKENS * GEMMA4_E4B.vision.pooling_kernel_size ** 2
#: patches the encoder runs per image: the processor's padded length
ENCODER_PATCHES = GEMMA4_E4B.vision.max_patches
STEP_FLOOR_ORIGIN = ("none measured: data/profiles/h200.json records host time per op (launch_overhead_ns) and "
                     "no graph replay time, no per-step device floor; 0 unless step_floor_ns is given")


#: ``"h100"`` / ``"h200"`` -> their datasheet peaks (dense bf16 TFLOP/s, HBM TB/s, with the source)
GPUS: dict[str, GpuPeak] = {key: next(p for p in load_peaks() if p.name == name)
                             for key, name in _GPU_TABLE_NAMES.items()}


def get_gpu(gpu: str | GpuPeak) -> tuple[str, GpuPeak]:
    """``(key, peak)`` of ``gpu`` (a key of :data:`GPUS`); ``UsageError`` names the choices."""
    if isinstance(gpu, GpuPeak):
        for key, peak in GPUS.items():
            if peak == gpu:
                return key, peak
        raise UsageError(f"GPU {gpu.name!r} has no recorded efficiencies: choose from {', '.join(GPUS)}")
    try:
        return gpu, GPUS[gpu]
    except (KeyError, TypeError):
        raise UsageError(f"unknown GPU {gpu!r}: choose from {', '.join(GPUS)}") from None


@dataclass(frozen=True)
class PrefillChunk:
    """One request's prompt chunk: ``tokens`` scheduled after ``context_before`` already cached.

    ``samples``: the chunk ends the prompt, so the step samples a token for it (its row gets logits).
    """

    tokens: int
    context_before: int = 0
    samples: bool = False

    def __post_init__(self) -> None:
        if self.tokens < 1 or self.context_before < 0:
            raise UsageError(f"a prefill chunk needs tokens >= 1 and context_before >= 0, "
                             f"got {self.tokens} after {self.context_before}")


@dataclass(frozen=True)
class PartTime:
    """One part's roofline: its bytes and FLOPs, both times (ns), the bound, the efficiencies used."""

    name: str
    bytes: int
    flops: int
    memory_ns: float
    compute_ns: float
    stream_efficiency: str
    compute_efficiency: str
    stream_value: float
    compute_value: float
    assumed: bool
    source: str = SOURCE

    @property
    def time_ns(self) -> float:
        return max(self.memory_ns, self.compute_ns)

    @property
    def bound(self) -> str:
        if not self.bytes and not self.flops:
            return "none"
        return "compute" if self.compute_ns > self.memory_ns else "memory"


@dataclass(frozen=True)
class DeviceTime:
    """One step's device time (ns) on ``gpu``: the parts, the floor, and the K/V bytes attention read."""

    gpu: str
    gpu_name: str
    parts: tuple[PartTime, ...]
    kv_read_bytes: int
    floor_ns: float = 0.0
    floor_origin: str = STEP_FLOOR_ORIGIN
    source: str = SOURCE

    @property
    def total_ns(self) -> float:
        return sum(p.time_ns for p in self.parts) + self.floor_ns

    @property
    def total_ms(self) -> float:
        return self.total_ns / 1e6

    def part(self, name: str) -> PartTime:
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(name)

    def _sum(self, attr: str, prefix: str) -> int:
        return sum(getattr(p, attr) for p in self.parts if p.name.startswith(prefix))

    @property
    def weight_bytes(self) -> int:
        """Decoder and LM-head weights streamed this step."""
        return self.part("decoder_gemm").bytes + self.part("lm_head").bytes

    @property
    def gemm_flops(self) -> int:
        return self.part("decoder_gemm").flops

    @property
    def lm_head_flops(self) -> int:
        return self.part("lm_head").flops

    @property
    def attention_flops(self) -> int:
        return self._sum("flops", "decode_attn_") + self._sum("flops", "prefill_attn_")

    @property
    def vision_flops(self) -> int:
        return self._sum("flops", "vision_")


def _window_pairs(context_before: int, tokens: int, window: int) -> int:
    """Sum over the chunk's queries (positions ``context_before + 1 .. + tokens``, 1-based) of ``min(pos, window)``."""
    a, b = context_before + 1, context_before + tokens
    if window <= 0 or b <= window:
        return (a + b) * tokens // 2
    if a > window:
        return tokens * window
    return (a + window) * (window - a + 1) // 2 + (b - window) * window


@functools.lru_cache(maxsize=16)
def _default_efficiencies(gpu: str) -> Efficiencies:
    return load_efficiencies(gpu)


def _attention_parts(arch: Gemma4Arch, ctx: tuple, chunks: tuple) -> tuple[list, int]:
    """``(name, bytes, flops, stream, compute)`` of each attention part, and the K/V bytes read
    (``ctx``: the keys each decoding request attends to)."""
    eb = arch.element_bytes
    full_keys = sum(ctx)
    parts, kv_read = [], 0
    for g in arch.attention_groups:
        kind = "sliding" if g.layer_type == SLIDING else "global"
        kv_tok = g.kv_bytes_per_token(eb)
        qo_tok = 2 * g.num_heads * g.head_dim * eb
        pair_flops = 4 * g.head_dim * g.num_heads
        w = g.window
        dec_keys = full_keys if w == 0 else sum(c if c < w else w for c in ctx)
        dec_kv = g.reading_layers * dec_keys * kv_tok
        parts.append((f"decode_attn_{kind}", dec_kv + g.reading_layers * len(ctx) * qo_tok,
                      g.reading_layers * dec_keys * pair_flops, "attn_decode_stream", "attn_decode_compute"))
        pre_keys = pre_pairs = pre_q = 0
        for ch in chunks:
            seen = ch.context_before + ch.tokens
            pre_keys += seen if w == 0 else seen - max(0, ch.context_before - w + 1)
            pre_pairs += _window_pairs(ch.context_before, ch.tokens, w)
            pre_q += ch.tokens
        pre_kv = g.reading_layers * pre_keys * kv_tok
        compute = "attn_prefill_sliding_compute" if kind == "sliding" else "attn_prefill_global_compute"
        parts.append((f"prefill_attn_{kind}", pre_kv + g.reading_layers * pre_q * qo_tok,
                      g.reading_layers * pre_pairs * pair_flops, "attn_prefill_stream", compute))
        kv_read += dec_kv + pre_kv
    return parts, kv_read


def _vision_parts(arch: Gemma4Arch, n: int, p: int, s: int) -> list:
    v, eb = arch.vision, arch.element_bytes
    weights = v.streamed_params(arch.hidden_size) * eb if n else 0
    gemm = n * (2 * (v.num_layers * v.layer_params + v.patch_embed_params) * p
                + 2 * v.projection_params(arch.hidden_size) * s + p * v.hidden_size)
    attn_flops = n * v.num_layers * 4 * v.head_dim * v.num_heads * p * p
    attn_bytes = n * v.num_layers * (2 * v.num_heads + 2 * v.num_kv_heads) * v.head_dim * p * eb
    return [("vision_gemm", weights, gemm, "vision_stream", "vision_gemm_compute"),
            ("vision_attn", attn_bytes, attn_flops, "attn_prefill_stream", "vision_attn_compute")]


def step_device_time(arch: Gemma4Arch, gpu: str | GpuPeak, shape: StepShape, *,
                     patches_per_image: int = ENCODER_PATCHES, soft_tokens_per_image: int = PR40143_SOFT_TOKENS,
                     efficiencies: Efficiencies | None = None, step_floor_ns: float = 0.0,
                     floor_origin: str | None = None) -> DeviceTime:
    """The device time of one engine step (ns, simulated): a roofline per part, summed (module text).

    ``shape``: the step's work (:class:`labkit.step_model.StepShape`); a decoding request attends to
    its context and its new token, a prefill chunk is ``(tokens, context_before[, samples])`` or a
    :class:`PrefillChunk`; each image encoded runs ``patches_per_image`` patches (default
    :data:`ENCODER_PATCHES`) into ``soft_tokens_per_image`` embeddings. ``gpu``: ``"h100"``/``"h200"``
    (:data:`GPUS`). ``efficiencies``: default the recorded ones for ``gpu``
    (:func:`labkit.gpu.device_efficiency.load_efficiencies`). ``step_floor_ns``: a fixed per-step
    cost added on top (none is measured, :data:`STEP_FLOOR_ORIGIN`).
    """
    key, peak = get_gpu(gpu)
    if not isinstance(shape, StepShape):
        raise UsageError(f"shape must be a StepShape, got {type(shape).__name__}")
    ctx = tuple(n + 1 for n in shape.decode_context_lens)
    if ctx and min(ctx) < 1:
        raise UsageError(f"decode context lengths must be >= 0, got {min(ctx) - 1}")
    chunks = tuple(c if isinstance(c, PrefillChunk) else PrefillChunk(*c) for c in shape.prefill_chunks)
    if shape.images_encoded < 0:
        raise UsageError(f"images_encoded must be >= 0, got {shape.images_encoded}")
    if patches_per_image < 1 or soft_tokens_per_image < 1:
        raise UsageError("patches_per_image and soft_tokens_per_image must be >= 1")
    if step_floor_ns < 0:
        raise UsageError(f"step_floor_ns must be >= 0, got {step_floor_ns}")
    eff = efficiencies if efficiencies is not None else _default_efficiencies(key)
    tokens = len(ctx) + sum(c.tokens for c in chunks)
    rows = len(ctx) + sum(1 for c in chunks if c.samples)
    eb = arch.element_bytes
    raw = [
        ("decoder_gemm", (arch.decoder_params * eb) if tokens else 0, 2 * arch.decoder_params * tokens,
         "gemm_stream", "gemm_compute"),
        ("lm_head", (arch.lm_head_params * eb) if rows else 0, 2 * arch.lm_head_params * rows,
         "lm_head_stream", "gemm_compute"),
        ("embedding", tokens * arch.embedding_row_elements * eb, 0, "gather_stream", "gemm_compute"),
        ("kv_write", tokens * arch.kv_write_bytes_per_token, 0, "gather_stream", "gemm_compute"),
    ]
    attn, kv_read = _attention_parts(arch, ctx, chunks)
    raw += attn + _vision_parts(arch, shape.images_encoded, patches_per_image, soft_tokens_per_image)
    bw, fl = peak.mem_tb_s * 1e3, peak.bf16_dense_tflops * 1e3  # bytes/ns, FLOP/ns
    parts = tuple(
        PartTime(name, nbytes, flops, nbytes / (bw * eff[s].value), flops / (fl * eff[c].value), s, c,
                 eff[s].value, eff[c].value, assumed=(nbytes > 0 and eff[s].assumed) or (flops > 0 and eff[c].assumed))
        for name, nbytes, flops, s, c in raw)
    return DeviceTime(key, peak.name, parts, kv_read, float(step_floor_ns),
                      floor_origin or (STEP_FLOOR_ORIGIN if not step_floor_ns else "given by the caller"))


def decode_step_ms(arch: Gemma4Arch, gpu: str | GpuPeak, batch_size: int, context: int, **kwargs) -> float:
    """Device time (ms, simulated) of a pure decode step: ``batch_size`` requests at ``context`` tokens each."""
    if batch_size < 1:
        raise UsageError(f"batch_size must be >= 1, got {batch_size}")
    return step_device_time(arch, gpu, StepShape((context - 1,) * batch_size), **kwargs).total_ms


def describe(result: DeviceTime) -> list[dict]:
    """One row per part (and the floor) for a table: bytes, FLOPs, times (``_ns``), bound, efficiencies, source."""
    rows = [{"part": p.name, "bytes": p.bytes, "flops": p.flops, "memory_ns": p.memory_ns,
             "compute_ns": p.compute_ns, "time_ns": p.time_ns, "bound": p.bound,
             "stream_efficiency": p.stream_efficiency, "stream_value": p.stream_value,
             "compute_efficiency": p.compute_efficiency, "compute_value": p.compute_value,
             "assumed": p.assumed, "gpu": result.gpu_name, "source": p.source} for p in result.parts]
    rows.append({"part": "step_floor", "bytes": 0, "flops": 0, "memory_ns": 0.0, "compute_ns": 0.0,
                 "time_ns": result.floor_ns, "bound": "none", "stream_efficiency": None, "stream_value": None,
                 "compute_efficiency": None, "compute_value": None,
                 "assumed": True, "gpu": result.gpu_name, "source": result.source, "origin": result.floor_origin})
    return rows


def full_batch_device_ns(gpu: str, requests: int, prompt_len: int) -> float:
    """The device step (ns, simulated) of ``requests`` decoding their first token after a ``prompt_len``
    prompt: the earliest full-batch step, the shortest context, the fastest step."""
    return step_device_time(GEMMA4_E4B, gpu, StepShape((prompt_len,) * requests)).total_ns


def describe_device(gpu: str) -> str:
    """The device model in words, for a result's parameters."""
    _, peak = get_gpu(gpu)
    return f"Gemma-4-E4B on the {peak.name}: a roofline per part, summed, no per-step floor ({SOURCE})"
