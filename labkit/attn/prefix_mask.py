"""The prefix-LM attention mask: causal (optional sliding window) OR image tokens attending within their range.

More: docs/reference.md, ``labkit.attn.prefix_mask``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

__all__ = ["prefix_lm_mask", "as_range_list", "query_range_bounds", "count_allowed_pairs", "row_ranges", "VarlenInfo",
           "check_varlen_args", "prefix_attention_ref", "padded_prefix_lm_mask", "make_prefix_lm_mask_mod",
           "SUPPORTED_DTYPES", "SUPPORTED_HEAD_DIMS"]

Range = tuple[int, int]
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)


def as_range_list(ranges) -> list[Range]:
    """``None`` / pairs / an int tensor ``(R, 2)`` as a list of ``(start, end)`` ints."""
    if ranges is None:
        return []
    if isinstance(ranges, torch.Tensor):
        if ranges.numel() == 0:
            return []
        if ranges.dim() != 2 or ranges.shape[-1] != 2:
            raise ValueError(f"ranges tensor must have shape (R, 2), got {tuple(ranges.shape)}")
        return [(int(s), int(e)) for s, e in ranges.tolist()]
    out = []
    for pair in ranges:
        if len(pair) != 2:
            raise ValueError(f"a range is a (start, end) pair, got {pair!r}")
        out.append((int(pair[0]), int(pair[1])))
    return out


def _check_lengths(q_len: int, kv_len: int, sliding_window: int) -> None:
    if q_len < 0 or kv_len < 0:
        raise ValueError(f"lengths must be >= 0, got q_len={q_len}, kv_len={kv_len}")
    if q_len > kv_len:
        raise ValueError(f"q_len ({q_len}) must not exceed kv_len ({kv_len})")
    if sliding_window < 0:
        raise ValueError(f"sliding_window must be >= 0 (0 = none), got {sliding_window}")


def prefix_lm_mask(q_len: int, kv_len: int, ranges=None, sliding_window: int = 0, *, device=None) -> torch.Tensor:
    """The boolean mask ``(q_len, kv_len)`` (True = may attend) of one sequence, straight from the rule.

    ``ranges``: ``None``, ``(start, end)`` pairs or an int tensor ``(R, 2)``; inclusive,
    absolute token positions. ``sliding_window`` in tokens (0 = none).
    """
    _check_lengths(q_len, kv_len, sliding_window)
    q = torch.arange(kv_len - q_len, kv_len, device=device)[:, None]  # (q_len, 1) absolute positions
    k = torch.arange(kv_len, device=device)[None, :]  # (1, kv_len)
    mask = k <= q
    if sliding_window > 0:
        mask &= (q - k) < sliding_window
    for s, e in as_range_list(ranges):
        if s < e:
            mask |= (s <= q) & (q <= e) & (s <= k) & (k <= e)
    return mask


def query_range_bounds(q_len: int, kv_len: int, ranges=None, *, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per query, the key interval ``[lo, hi]`` its image ranges open (int64 ``(q_len,)`` each; none: ``[0, -1]``)."""
    _check_lengths(q_len, kv_len, 0)
    q = torch.arange(kv_len - q_len, kv_len, device=device)  # (q_len,)
    big = torch.iinfo(torch.int64).max
    lo = torch.full((q_len,), big, dtype=torch.int64, device=device)
    hi = torch.full((q_len,), -1, dtype=torch.int64, device=device)
    for s, e in as_range_list(ranges):
        if s < e:
            inside = (s <= q) & (q <= e)
            lo = torch.where(inside, torch.clamp(lo, max=s), lo)
            hi = torch.where(inside, torch.clamp(hi, min=e), hi)
    hi = torch.clamp(hi, max=kv_len - 1)
    empty = hi < 0
    lo = torch.where(empty, torch.zeros_like(lo), lo)
    hi = torch.where(empty, torch.full_like(hi, -1), hi)
    return lo, hi


def count_allowed_pairs(q_len: int, kv_len: int, ranges=None, sliding_window: int = 0) -> int:
    """Number of allowed (query, key) pairs of one sequence, without building the mask."""
    _check_lengths(q_len, kv_len, sliding_window)
    q = torch.arange(kv_len - q_len, kv_len, dtype=torch.int64)
    c_lo = torch.clamp(q - sliding_window + 1, min=0) if sliding_window > 0 else torch.zeros_like(q)
    lo, hi = query_range_bounds(q_len, kv_len, ranges)
    lo = torch.clamp(lo, min=0)
    causal = q - c_lo + 1
    rng = torch.clamp(hi - lo + 1, min=0)
    overlap = torch.clamp(torch.minimum(q, hi) - torch.maximum(c_lo, lo) + 1, min=0)
    return int((causal + rng - overlap).sum())


def row_ranges(prefix_ranges: torch.Tensor | None, row: int) -> list[Range]:
    """The valid ``(start, end)`` pairs of batch row ``row`` of a ``(num_seqs, R, 2)`` tensor."""
    if prefix_ranges is None:
        return []
    return [(s, e) for s, e in prefix_ranges[row].tolist() if s < e]


# -- argument checks shared by the kernel wrapper and the reference -----------------------

@dataclass(frozen=True)
class VarlenInfo:
    """Host-side facts about a packed batch, gathered once before a launch."""

    seq_lens: tuple[tuple[int, int], ...]  # (q_len, kv_len) per row
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_seqlen_q: int
    num_ranges: int  # prefix_ranges.shape[1], 0 when there are none

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def group(self) -> int:
        return self.num_heads // self.num_kv_heads


def _host_lens(cu: torch.Tensor, name: str, total: int) -> list[int]:
    vals = cu.tolist()  # reads the device tensor (a sync) when no host copy was given
    if vals[0] != 0:
        raise ValueError(f"{name} must start at 0, got {vals[0]}")
    lens = [b - a for a, b in zip(vals[:-1], vals[1:])]
    if any(n < 0 for n in lens):
        raise ValueError(f"{name} must be non-decreasing")
    if vals[-1] != total:
        raise ValueError(f"{name} must end at the number of tokens ({total}), got {vals[-1]}")
    return lens


def check_varlen_args(q, k, v, cu_seqlens_q, cu_seqlens_k, prefix_ranges=None, *, sliding_window=0,
                      scale=None, max_seqlen_q=None, seq_lens: Sequence[tuple[int, int]] | None = None,
                      for_kernel: bool = True) -> VarlenInfo:
    """Validate a packed prefix-LM attention call; ``ValueError`` with a one-line reason.

    ``for_kernel=False`` (the reference) also accepts float64 and any head size; ``seq_lens``
    (host ``(q_len, kv_len)`` per row) is trusted and saves reading ``cu_seqlens`` back.
    """
    for name, t in (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-D (tokens, heads, head_dim), got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES and not (not for_kernel and t.dtype == torch.float64):
            raise ValueError(f"{name} dtype {t.dtype} not supported: use float16, bfloat16 or float32")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k and v shapes differ: {tuple(k.shape)} vs {tuple(v.shape)}")
    total_q, num_heads, head_dim = q.shape
    total_k, num_kv_heads, kv_dim = k.shape
    if kv_dim != head_dim:
        raise ValueError(f"head_dim differs between q ({head_dim}) and k/v ({kv_dim})")
    if for_kernel and head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim {head_dim} not supported: one of {SUPPORTED_HEAD_DIMS}")
    if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    devices = {t.device for t in (q, k, v, cu_seqlens_q, cu_seqlens_k)}
    if prefix_ranges is not None:
        if not isinstance(prefix_ranges, torch.Tensor):
            raise ValueError(f"prefix_ranges must be a torch.Tensor or None, got {type(prefix_ranges).__name__}")
        devices.add(prefix_ranges.device)
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(str(d) for d in devices)}")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu.dtype != torch.int32 or cu.dim() != 1 or cu.shape[0] < 2:
            raise ValueError(f"{name} must be int32 of shape (num_seqs + 1,), got {cu.dtype} {tuple(cu.shape)}")
    if cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k lengths differ: {cu_seqlens_q.shape[0]} vs {cu_seqlens_k.shape[0]}")
    num_seqs = cu_seqlens_q.shape[0] - 1
    if seq_lens is not None:
        pairs = [(int(a), int(b)) for a, b in seq_lens]
        if len(pairs) != num_seqs:
            raise ValueError(f"seq_lens has {len(pairs)} rows but cu_seqlens has {num_seqs}")
        if sum(a for a, _ in pairs) != total_q or sum(b for _, b in pairs) != total_k:
            raise ValueError("seq_lens do not add up to the number of q / kv tokens")
    else:
        pairs = list(zip(_host_lens(cu_seqlens_q, "cu_seqlens_q", total_q),
                         _host_lens(cu_seqlens_k, "cu_seqlens_k", total_k)))
    for i, (ql, kl) in enumerate(pairs):
        if ql < 0 or kl < 0:
            raise ValueError(f"row {i}: negative length ({ql}, {kl})")
        if ql > kl:
            raise ValueError(f"row {i}: q_len {ql} exceeds kv_len {kl}")
    num_ranges = 0
    if prefix_ranges is not None:
        if prefix_ranges.dtype != torch.int32 or prefix_ranges.dim() != 3 or prefix_ranges.shape[-1] != 2:
            raise ValueError("prefix_ranges must be int32 of shape (num_seqs, max_ranges, 2), got "
                             f"{prefix_ranges.dtype} {tuple(prefix_ranges.shape)}")
        if prefix_ranges.shape[0] != num_seqs:
            raise ValueError(f"prefix_ranges has {prefix_ranges.shape[0]} rows but the batch has {num_seqs}")
        num_ranges = prefix_ranges.shape[1]
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 0:
        raise ValueError(f"sliding_window must be an int >= 0 (0 = none), got {sliding_window!r}")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number or None, got {scale!r}")
    longest = max((a for a, _ in pairs), default=0)
    if max_seqlen_q is not None:
        if int(max_seqlen_q) < longest:
            raise ValueError(f"max_seqlen_q ({max_seqlen_q}) is below the longest query run ({longest})")
        longest = int(max_seqlen_q)
    return VarlenInfo(tuple(pairs), num_heads, num_kv_heads, head_dim, longest, num_ranges)


# -- reference ---------------------------------------------------------------------------

def prefix_attention_ref(q, k, v, cu_seqlens_q, cu_seqlens_k, prefix_ranges=None, *, sliding_window=0,
                         scale=None, max_seqlen_q=None, seq_lens=None, compute_dtype=torch.float64):
    """Plain-torch prefix-LM attention over a packed batch, in ``compute_dtype``; arguments as ``prefix_attention``."""
    info = check_varlen_args(q, k, v, cu_seqlens_q, cu_seqlens_k, prefix_ranges, sliding_window=sliding_window,
                             scale=scale, max_seqlen_q=max_seqlen_q, seq_lens=seq_lens, for_kernel=False)
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(info.head_dim)
    out = torch.zeros(q.shape, dtype=compute_dtype, device=q.device)
    qs = ks = 0
    for row, (q_len, kv_len) in enumerate(info.seq_lens):
        if q_len > 0:
            qr = q[qs:qs + q_len].to(compute_dtype).transpose(0, 1)  # (H, q_len, D)
            kr = k[ks:ks + kv_len].to(compute_dtype).transpose(0, 1)  # (H_kv, kv_len, D)
            vr = v[ks:ks + kv_len].to(compute_dtype).transpose(0, 1)
            kr = kr.repeat_interleave(info.group, dim=0)  # (H, kv_len, D): head h reads kv head h // group
            vr = vr.repeat_interleave(info.group, dim=0)
            mask = prefix_lm_mask(q_len, kv_len, row_ranges(prefix_ranges, row), sliding_window, device=q.device)
            scores = (qr @ kr.transpose(1, 2)) * scale  # (H, q_len, kv_len)
            scores = scores.masked_fill(~mask, float("-inf"))
            out[qs:qs + q_len] = (torch.softmax(scores, dim=-1) @ vr).transpose(0, 1)
        qs += q_len
        ks += kv_len
    return out


# -- padded-batch forms for SDPA and FlexAttention peers ------------------------------------

def padded_prefix_lm_mask(seq_lens, ranges_per_row, sliding_window=0, *, q_pad=None, kv_pad=None, device=None):
    """Boolean mask ``(B, 1, q_pad, kv_pad)`` of a left-aligned padded batch (padded queries see key 0)."""
    q_pad = q_pad or max(a for a, _ in seq_lens)
    kv_pad = kv_pad or max(b for _, b in seq_lens)
    mask = torch.zeros((len(seq_lens), 1, q_pad, kv_pad), dtype=torch.bool, device=device)
    for b, (q_len, kv_len) in enumerate(seq_lens):
        mask[b, 0, :q_len, :kv_len] = prefix_lm_mask(q_len, kv_len, ranges_per_row[b], sliding_window, device=device)
        mask[b, 0, q_len:, 0] = True
    return mask


def make_prefix_lm_mask_mod(seq_lens, ranges_per_row, sliding_window: int = 0, *, device=None
                            ) -> Callable:
    """A FlexAttention ``mask_mod(b, h, q_idx, kv_idx)`` for the rule over a left-aligned padded batch."""
    if sliding_window < 0:
        raise ValueError(f"sliding_window must be >= 0, got {sliding_window}")
    q_pad = max(max(a for a, _ in seq_lens), 1)
    n = len(seq_lens)
    q_abs = torch.zeros((n, q_pad), dtype=torch.int64)
    q_lo = torch.zeros((n, q_pad), dtype=torch.int64)
    q_hi = torch.full((n, q_pad), -1, dtype=torch.int64)
    kv_lens = torch.tensor([b for _, b in seq_lens], dtype=torch.int64)
    for b, (q_len, kv_len) in enumerate(seq_lens):
        if q_len == 0:
            continue
        q_abs[b, :q_len] = torch.arange(kv_len - q_len, kv_len)
        q_abs[b, q_len:] = kv_len - 1
        lo, hi = query_range_bounds(q_len, kv_len, ranges_per_row[b])
        q_lo[b, :q_len], q_hi[b, :q_len] = lo, hi
        q_lo[b, q_len:], q_hi[b, q_len:] = lo[-1], hi[-1]
    q_abs, q_lo, q_hi, kv_lens = (t.to(device) for t in (q_abs, q_lo, q_hi, kv_lens))
    window = int(sliding_window)

    def prefix_lm_mask_mod(b, h, q_idx, kv_idx):
        qa = q_abs[b, q_idx]
        allowed = kv_idx <= qa
        if window > 0:
            allowed = allowed & (qa - kv_idx < window)
        in_range = (q_lo[b, q_idx] <= kv_idx) & (kv_idx <= q_hi[b, q_idx])
        return (allowed | in_range) & (kv_idx < kv_lens[b])

    return prefix_lm_mask_mod
