"""The lab's prefix attention against vLLM's ``unified_attention``, both under the Triton interpreter.

The same random batch (packed queries, keys and values, image ranges, optional sliding
window) goes to the lab's kernel in the varlen layout and to vLLM's kernel on a paged KV
cache built from the same keys and values (shuffled block table), and both are checked
against a PyTorch reference of the mask rule (facts D.5):
``allowed[q, k] = (k <= q and (W == 0 or q - k < W)) or (q and k in one range (s, e) with s < e)``.
Small shapes: the interpreter is slow.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm.sh)")

import torch  # noqa: E402
from vllm.v1.attention.ops.triton_unified_attention import unified_attention  # noqa: E402

from labkit.attn.prefix_attention import prefix_attention  # noqa: E402

BLOCK = 16  # KV-cache block size in tokens


def reference(q, k, v, seqs, ranges, window, scale):
    """Per-row softmax attention with the prefix-LM mask; float64, returns q's shape."""
    out = torch.empty_like(q, dtype=torch.float64)
    group = q.shape[1] // k.shape[1]
    q0 = k0 = 0
    for row, (q_len, kv_len) in enumerate(seqs):
        qpos = torch.arange(kv_len - q_len, kv_len)[:, None]  # (q_len, 1) absolute positions
        kpos = torch.arange(kv_len)[None, :]  # (1, kv_len)
        allowed = kpos <= qpos
        if window:
            allowed &= (qpos - kpos) < window
        for s, e in ranges[row]:
            if s < e:
                allowed |= (qpos >= s) & (qpos <= e) & (kpos >= s) & (kpos <= e)
        qq = q[q0:q0 + q_len].double()  # (q_len, H, D)
        kk = k[k0:k0 + kv_len].double().repeat_interleave(group, dim=1)  # (kv_len, H, D)
        vv = v[k0:k0 + kv_len].double().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qq, kk) * scale
        scores = scores.masked_fill(~allowed[None], float("-inf"))
        out[q0:q0 + q_len] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vv)
        q0 += q_len
        k0 += kv_len
    return out


def random_batch(rng: random.Random):
    heads, kv_heads = rng.choice(((2, 2), (4, 2), (4, 1)))
    dim = 32
    seqs, ranges = [], []
    for _ in range(rng.randint(1, 3)):
        kv_len = rng.randint(1, 56)
        q_len = rng.choice((1, rng.randint(1, kv_len), kv_len))
        seqs.append((q_len, kv_len))
        row, pos = [], rng.randint(0, 6)
        while pos < kv_len - 1 and rng.random() < 0.7:
            end = min(kv_len - 1, pos + rng.randint(0, 14))
            row.append((pos, end))
            pos = end + rng.randint(1, 10)
        ranges.append(row)
    window = rng.choice((0, 0, 5, 12))
    return heads, kv_heads, dim, seqs, ranges, window


def range_tensor(ranges):
    width = max(1, max(len(r) for r in ranges))
    t = torch.zeros(len(ranges), width, 2, dtype=torch.int32)  # (num_seqs, max_ranges, 2), (0, 0) padding
    for i, row in enumerate(ranges):
        for j, (s, e) in enumerate(row):
            t[i, j, 0], t[i, j, 1] = s, e
    return t


def run_vllm(q, k, v, seqs, prefix, window, scale, rng):
    """Scatter k/v into a paged cache (random block order) and call ``unified_attention``."""
    num_seqs = len(seqs)
    blocks_per_seq = [-(-kv // BLOCK) for _, kv in seqs]
    num_blocks = sum(blocks_per_seq) + 2
    order = list(range(1, num_blocks))
    rng.shuffle(order)
    kv_heads, dim = k.shape[1], k.shape[2]
    k_cache = torch.zeros(num_blocks, BLOCK, kv_heads, dim, dtype=k.dtype)  # (blocks, block, H_kv, D)
    v_cache = torch.zeros_like(k_cache)
    table = torch.zeros(num_seqs, max(blocks_per_seq), dtype=torch.int32)
    k0 = 0
    for row, (_, kv_len) in enumerate(seqs):
        for b in range(blocks_per_seq[row]):
            blk = order.pop()
            table[row, b] = blk
            lo, hi = b * BLOCK, min(kv_len, (b + 1) * BLOCK)
            k_cache[blk, : hi - lo] = k[k0 + lo:k0 + hi]
            v_cache[blk, : hi - lo] = v[k0 + lo:k0 + hi]
        k0 += kv_len
    cu_q = torch.tensor([0] + [sum(s[0] for s in seqs[: i + 1]) for i in range(num_seqs)], dtype=torch.int32)
    out = torch.empty_like(q)
    unified_attention(
        q=q, k=k_cache, v=v_cache, out=out, cu_seqlens_q=cu_q, max_seqlen_q=max(s[0] for s in seqs),
        seqused_k=torch.tensor([kv for _, kv in seqs], dtype=torch.int32), max_seqlen_k=max(kv for _, kv in seqs),
        softmax_scale=scale, causal=True, window_size=(window - 1, 0) if window else (-1, -1),
        block_table=table, softcap=0, q_descale=None, k_descale=None, v_descale=None, mm_prefix_range=prefix,
    )
    return out


@pytest.mark.parametrize("seed", range(12))
def test_lab_kernel_matches_vllm_unified_attention(seed):
    rng = random.Random(seed)
    heads, kv_heads, dim, seqs, ranges, window = random_batch(rng)
    gen = torch.Generator().manual_seed(seed)
    total_q, total_k = sum(s[0] for s in seqs), sum(s[1] for s in seqs)
    q = torch.randn(total_q, heads, dim, generator=gen)  # (total_q, H, D)
    k = torch.randn(total_k, kv_heads, dim, generator=gen)  # (total_k, H_kv, D)
    v = torch.randn(total_k, kv_heads, dim, generator=gen)
    scale = dim ** -0.5
    prefix = range_tensor(ranges)
    cu_q = torch.tensor([0] + [sum(s[0] for s in seqs[: i + 1]) for i in range(len(seqs))], dtype=torch.int32)
    cu_k = torch.tensor([0] + [sum(s[1] for s in seqs[: i + 1]) for i in range(len(seqs))], dtype=torch.int32)

    ref = reference(q, k, v, seqs, ranges, window, scale).float()
    theirs = run_vllm(q, k, v, seqs, prefix, window, scale, rng)
    ours = prefix_attention(q, k, v, cu_q, cu_k, prefix, sliding_window=window, scale=scale)
    assert ours.shape == theirs.shape == q.shape
    torch.testing.assert_close(theirs, ref, atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(ours, ref, atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(ours, theirs, atol=2e-4, rtol=2e-4)


def test_ranges_change_the_output():
    # guard against a vacuous comparison: a query inside an image sees a later image token
    rng = random.Random(0)
    q = torch.randn(8, 2, 32)
    k = torch.randn(8, 2, 32)
    v = torch.randn(8, 2, 32)
    plain = run_vllm(q, k, v, [(8, 8)], None, 0, 32 ** -0.5, rng)
    with_image = run_vllm(q, k, v, [(8, 8)], range_tensor([[(2, 5)]]), 0, 32 ** -0.5, rng)
    assert torch.allclose(plain[:2], with_image[:2]) and torch.allclose(plain[6:], with_image[6:])
    assert not torch.allclose(plain[2:5], with_image[2:5])
