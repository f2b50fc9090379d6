"""A Triton prefix-LM attention kernel over packed variable-length batches (flash-attn's varlen layout).

More: docs/reference.md, ``labkit.attn.prefix_attention``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from labkit.device import configure_triton, kernel_mode

configure_triton()  # must precede the @triton.jit definitions below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from labkit.attn.prefix_mask import VarlenInfo, check_varlen_args, prefix_attention_ref  # noqa: E402

__all__ = ["prefix_attention", "prefix_attention_ref", "KernelConfig", "pick_config", "CUDA_CONFIGS"]

_LOG2E = 1.4426950408889634


@triton.jit
def _attend_tile(acc, l_i, m_i, q, q_pos, r_lo, r_hi, K, V, start_n, kv_len, sliding_window, qk_scale,
                 stride_kt, stride_vt, offs_n, offs_d,
                 MASKED: tl.constexpr, USE_SW: tl.constexpr, USE_RANGES: tl.constexpr, IEEE_DOT: tl.constexpr):
    """One key tile of the online softmax; K/V point at this row's first key of this KV head."""
    k_pos = start_n + offs_n  # (BLOCK_N,) absolute key positions
    if MASKED:
        k_row = tl.minimum(k_pos, kv_len - 1)  # clamp: loads stay in bounds, scores are masked below
    else:
        k_row = k_pos
    k_t = tl.load(K + k_row[None, :] * stride_kt + offs_d[:, None])  # (D, BLOCK_N)
    if IEEE_DOT:
        qk = tl.dot(q, k_t, input_precision="ieee")
    else:
        qk = tl.dot(q, k_t)  # (BLOCK_M, BLOCK_N) fp32
    qk = qk * qk_scale
    if MASKED:
        allowed = k_pos[None, :] <= q_pos[:, None]
        if USE_SW:
            allowed = allowed & ((q_pos[:, None] - k_pos[None, :]) < sliding_window)
        if USE_RANGES:
            allowed = allowed | ((r_lo[:, None] <= k_pos[None, :]) & (k_pos[None, :] <= r_hi[:, None]))
        qk = tl.where(allowed, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))  # m_i starts finite, so m_new never is -inf
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(V + k_row[:, None] * stride_vt + offs_d[None, :])  # (BLOCK_N, D)
    if IEEE_DOT:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, l_i, m_new


@triton.jit
def _prefix_attn_fwd(
    Q, K, V, O,  # q (total_q, H, D), k/v (total_k, H_kv, D), out like q; last dim contiguous
    cu_q_ptr, cu_k_ptr,  # int32 (num_seqs + 1,) query / key prefix sums
    ranges_ptr,  # int32 (num_seqs, num_ranges, 2) inclusive image ranges (unused without USE_RANGES)
    num_seqs, num_ranges,  # batch rows; ranges per row
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,  # elements
    qk_scale,  # softmax scale * log2(e)
    sliding_window,  # tokens, 0 = none
    HEAD_DIM: tl.constexpr,  # D, a power of two
    GROUP: tl.constexpr,  # query heads per KV head
    GROUP_PAD: tl.constexpr,  # GROUP rounded up to a power of two
    BLOCK_Q: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per tile
    RANGES_PAD: tl.constexpr,  # ranges per row rounded up to a power of two (a specialization each)
    RANGE_CHUNK: tl.constexpr,  # ranges read per vector load
    USE_RANGES: tl.constexpr, USE_SW: tl.constexpr, IEEE_DOT: tl.constexpr,
):
    BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_PAD
    pid = tl.program_id(0)
    kv_head = tl.program_id(1)

    # batch row of this program: the last row whose first block index cu_q[i] // BLOCK_Q + i <= pid
    lo_s: tl.int32 = 0
    hi_s = num_seqs
    while lo_s < hi_s:
        mid = (lo_s + hi_s) // 2
        if tl.load(cu_q_ptr + mid) // BLOCK_Q + mid <= pid:
            lo_s = mid + 1
        else:
            hi_s = mid
    seq = lo_s - 1
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    k_start = tl.load(cu_k_ptr + seq)
    kv_len = tl.load(cu_k_ptr + seq + 1) - k_start
    q_off0 = (pid - (q_start // BLOCK_Q + seq)) * BLOCK_Q  # first query of this block, within the row
    if q_off0 >= q_len:
        return
    context_len = kv_len - q_len

    rows = tl.arange(0, BLOCK_M)
    q_local = q_off0 + rows // GROUP_PAD  # (BLOCK_M,) query index within the row
    head_in_group = rows % GROUP_PAD
    row_valid = (q_local < q_len) & (head_in_group < GROUP)
    q_local = tl.minimum(q_local, q_len - 1)  # padded rows act as the last query: no empty rows
    head = kv_head * GROUP + tl.minimum(head_in_group, GROUP - 1)
    q_pos = context_len + q_local  # absolute query positions
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)

    q_tok = (q_start + q_local).to(tl.int64)
    q = tl.load(Q + q_tok[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :])  # (BLOCK_M, D)

    # per query, the key interval its image ranges open: [r_lo, r_hi], empty = [kv_len, -1]
    r_lo = tl.zeros([BLOCK_M], dtype=tl.int32) + kv_len
    r_hi = tl.zeros([BLOCK_M], dtype=tl.int32) - 1
    if USE_RANGES:
        row_ranges = ranges_ptr + seq.to(tl.int64) * num_ranges * 2
        # unrolled on purpose: a runtime loop here kept Triton from pipelining the key loops below
        for r0 in tl.static_range(0, RANGES_PAD, RANGE_CHUNK):
            offs_r = r0 + tl.arange(0, RANGE_CHUNK)
            in_row = offs_r < num_ranges
            s = tl.load(row_ranges + offs_r * 2, mask=in_row, other=0)  # (RANGE_CHUNK,)
            e = tl.load(row_ranges + offs_r * 2 + 1, mask=in_row, other=0)
            inside = (in_row & (s < e))[None, :] & (s[None, :] <= q_pos[:, None]) & (q_pos[:, None] <= e[None, :])
            r_lo = tl.minimum(r_lo, tl.min(tl.where(inside, s[None, :], kv_len), axis=1))
            r_hi = tl.maximum(r_hi, tl.max(tl.where(inside, e[None, :], -1), axis=1))
        r_hi = tl.minimum(r_hi, kv_len - 1)

    # key-loop bounds of this tile
    q_first = context_len + q_off0
    q_last = context_len + tl.minimum(q_off0 + BLOCK_Q, q_len) - 1
    kv_hi = q_last + 1
    if USE_RANGES:
        kv_hi = tl.minimum(tl.maximum(kv_hi, tl.max(r_hi, axis=0) + 1), kv_len)
    kv_lo = tl.full([], 0, tl.int32)
    full_lo = tl.full([], 0, tl.int32)
    if USE_SW:
        need = q_pos - sliding_window + 1
        if USE_RANGES:
            need = tl.minimum(need, r_lo)
        kv_lo = (tl.maximum(tl.min(need, axis=0), 0) // BLOCK_N) * BLOCK_N
        full_lo = tl.cdiv(tl.maximum(q_last - sliding_window + 1, 0), BLOCK_N) * BLOCK_N
    full_lo = tl.minimum(tl.maximum(full_lo, kv_lo), kv_hi)
    full_hi = ((q_first + 1) // BLOCK_N) * BLOCK_N  # keys below every query of the tile
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), kv_hi)

    K_row = K + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh
    V_row = V + k_start.to(tl.int64) * stride_vt + kv_head * stride_vh
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - 1.0e30
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(kv_lo, full_lo, BLOCK_N):  # lower sliding-window edge
        acc, l_i, m_i = _attend_tile(acc, l_i, m_i, q, q_pos, r_lo, r_hi, K_row, V_row, start_n, kv_len,
                                     sliding_window, qk_scale, stride_kt, stride_vt, offs_n, offs_d,
                                     True, USE_SW, USE_RANGES, IEEE_DOT)
    for start_n in range(full_lo, full_hi, BLOCK_N):  # every pair allowed
        acc, l_i, m_i = _attend_tile(acc, l_i, m_i, q, q_pos, r_lo, r_hi, K_row, V_row, start_n, kv_len,
                                     sliding_window, qk_scale, stride_kt, stride_vt, offs_n, offs_d,
                                     False, USE_SW, USE_RANGES, IEEE_DOT)
    for start_n in range(full_hi, kv_hi, BLOCK_N):  # diagonal and image-range extension
        acc, l_i, m_i = _attend_tile(acc, l_i, m_i, q, q_pos, r_lo, r_hi, K_row, V_row, start_n, kv_len,
                                     sliding_window, qk_scale, stride_kt, stride_vt, offs_n, offs_d,
                                     True, USE_SW, USE_RANGES, IEEE_DOT)

    out = acc / l_i[:, None]
    o_ptrs = O + q_tok[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_valid[:, None])


# -- launch configuration -------------------------------------------------------------------

@dataclass(frozen=True)
class KernelConfig:
    """Tile shape and launch options: ``block_m`` rows (queries x grouped heads), ``block_n`` keys."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2

    def label(self) -> str:
        return f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}"

    def describe(self) -> str:
        """The config in words: ``128 x 32 tile, 8 warps, 2 stages``."""
        return f"{self.block_m} x {self.block_n} tile, {self.num_warps} warps, {self.num_stages} stages"


#: candidate GPU configs (``labkit bench attn --sweep`` times them); Hopper, bf16, head_dim up to 256.
#: Register/shared-memory use was read from sm_90 builds: at D=256, m128n32w8s2 keeps everything in
#: registers (128 KiB shared), m128n64w8s2 spills 24 B and needs 192 KiB shared, yet was the fastest
#: at both Gemma-3 prefill cases on an H200 (data/results/h200/attn_bench_quick.json), so it is the default.
CUDA_CONFIGS = {
    cfg.label(): cfg
    for cfg in (
        KernelConfig(128, 32, 8, 2),
        KernelConfig(128, 64, 8, 2),
        KernelConfig(64, 32, 4, 2),
        KernelConfig(64, 64, 4, 2),
        KernelConfig(16, 64, 4, 2),
        KernelConfig(16, 64, 4, 3),
        KernelConfig(16, 128, 4, 2),
    )
}


def pick_config(head_dim: int, group_pad: int, max_seqlen_q: int, mode: str | None = None) -> KernelConfig:
    """Default tile for a call: small under the interpreter, by head size and query length on a GPU."""
    mode = mode or kernel_mode()
    if mode == "interpret":
        return KernelConfig(max(16, group_pad), 16)
    if max_seqlen_q * group_pad <= 16:  # decode-like: one query per row, heads fill the tile
        cfg = KernelConfig(16, 64 if head_dim >= 256 else 128, 4, 2)
    elif head_dim >= 256:
        cfg = KernelConfig(128, 64, 8, 2)  # fastest of CUDA_CONFIGS at both prefill cases on an H200
    elif head_dim >= 128:
        cfg = KernelConfig(128, 64, 8, 3)
    else:
        cfg = KernelConfig(128, 64, 4, 3)
    if cfg.block_m < group_pad:
        cfg = KernelConfig(group_pad, cfg.block_n, cfg.num_warps, cfg.num_stages)
    return cfg


def _launch(q, k, v, out, cu_q, cu_k, prefix_ranges, info: VarlenInfo, sliding_window: int, scale: float,
            cfg: KernelConfig) -> None:
    group = info.group
    group_pad = triton.next_power_of_2(group)
    if cfg.block_m % group_pad or cfg.block_m < 16 or cfg.block_n < 16:
        raise ValueError(f"config {cfg} does not fit a group of {group} heads (block_m % {group_pad} != 0)")
    block_q = cfg.block_m // group_pad
    use_ranges = prefix_ranges is not None and info.num_ranges > 0
    ranges = prefix_ranges.contiguous() if use_ranges else cu_q  # any int32 tensor as a dummy pointer
    num_ranges = info.num_ranges if use_ranges else 0
    ranges_pad = max(triton.next_power_of_2(max(num_ranges, 1)), 2)
    grid = (q.shape[0] // block_q + info.num_seqs, info.num_kv_heads)
    _prefix_attn_fwd[grid](
        q, k, v, out, cu_q, cu_k, ranges, info.num_seqs, num_ranges,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        scale * _LOG2E, sliding_window,
        HEAD_DIM=info.head_dim, GROUP=group, GROUP_PAD=group_pad, BLOCK_Q=block_q, BLOCK_N=cfg.block_n,
        RANGES_PAD=ranges_pad, RANGE_CHUNK=min(ranges_pad, 32),
        USE_RANGES=use_ranges, USE_SW=sliding_window > 0, IEEE_DOT=q.dtype == torch.float32,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def prefix_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, prefix_ranges=None, *, sliding_window=0, scale=None,
                     max_seqlen_q=None, seq_lens=None, config: KernelConfig | None = None, out=None):
    """Prefix-LM attention over a packed batch with the Triton kernel; returns ``(total_q, H, D)`` in q's dtype.

    q ``(total_q, H, D)``, k/v ``(total_k, H_kv, D)`` (fp16, bf16 or fp32; D a power of two
    16..256); ``cu_seqlens_q``/``cu_seqlens_k`` int32 ``(num_seqs + 1,)``; a row's queries are
    the last ``q_len`` of its ``kv_len`` keys. ``prefix_ranges``: int32 ``(num_seqs, R, 2)``
    inclusive image ranges, ``(0, 0)`` padding, or ``None`` for plain causal attention.
    ``sliding_window`` in tokens (0 = none); ``scale`` defaults to ``1/sqrt(D)``.
    ``seq_lens`` (host ``(q_len, kv_len)`` per row) saves reading ``cu_seqlens`` back from
    the device. ``config`` overrides the tile (:data:`CUDA_CONFIGS`). Arguments are checked
    before launch (``ValueError``).
    """
    info = check_varlen_args(q, k, v, cu_seqlens_q, cu_seqlens_k, prefix_ranges, sliding_window=sliding_window,
                             scale=scale, max_seqlen_q=max_seqlen_q, seq_lens=seq_lens)
    mode = kernel_mode()
    if q.device.type == "cpu" and mode != "interpret":
        raise ValueError("CPU tensors need the Triton interpreter (TRITON_INTERPRET=1 before labkit is imported)")
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device or out.stride(-1) != 1:
        raise ValueError("out must match q's shape, dtype and device, with a contiguous last dim")
    if q.shape[0] == 0:
        return out
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(info.head_dim)
    group_pad = triton.next_power_of_2(info.group)
    cfg = config or pick_config(info.head_dim, group_pad, info.max_seqlen_q, mode)
    _launch(q, k, v, out, cu_seqlens_q, cu_seqlens_k, prefix_ranges, info, sliding_window, scale, cfg)
    return out
