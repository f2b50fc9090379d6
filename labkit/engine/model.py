"""The mini engine's model: a transformer stack with random weights, one device op per kernel group.

More: docs/reference.md, ``labkit.engine.model``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from labkit.engine.config import ModelConfig
from labkit.trace.capture import layer_phase

logger = logging.getLogger(__name__)

#: ops of one decoder layer, in launch order
LAYER_OPS = ("input_norm", "qkv_proj", "rope", "kv_write", "attention", "o_proj", "post_attn_norm",
             "gate_up_proj", "act_mul", "down_proj", "post_mlp_norm")
#: ops around the layers
HEAD_OPS = ("embed",)
TAIL_OPS = ("final_norm", "lm_head", "sample")


@dataclass
class ForwardBatch:
    """What one forward needs: sizes (host ints) and, on a real device, the input tensors.

    ``num_tokens``: query tokens in the step; ``kv_tokens``: keys summed over rows;
    ``kv_tokens_window``: keys a sliding-window layer reads (``sum(min(kv_len, window))``).
    ``tensors`` (real devices only): ``input_ids`` (T,), ``positions`` (T,), ``cu_seqlens_q`` and
    ``cu_seqlens_k`` int32 (num_seqs + 1,), ``slots`` int64 (T,) (where new keys go),
    ``last_idx`` int64 (num_seqs,) (each row's last query token).
    """

    num_seqs: int
    num_tokens: int
    kv_tokens: int
    kv_tokens_window: int
    tensors: dict | None = None
    seq_lens: list | None = None  # host (q_len, kv_len) per row: the kernel never reads cu_seqlens back


class TransformerStack:
    """Random-weight decoder stack for ``cfg`` on a real torch device, or weightless for simulation."""

    def __init__(self, cfg: ModelConfig, device=None, *, dtype=None, seed: int = 0,
                 attention: Callable | None = None) -> None:
        self.cfg = cfg
        self.real = device is not None
        self.attention_fn = attention
        self.weights: list[dict] = []
        self.k_buf = self.v_buf = None
        if not self.real:
            return
        import torch

        self.torch = torch
        self.device = torch.device(device)
        if dtype is None:
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.dtype = dtype
        gen = torch.Generator(device=self.device).manual_seed(seed)
        self._seed = seed
        h, d = cfg.hidden_size, cfg.head_dim

        def rand(*shape, fan_in):
            # (shape) weights scaled 1/sqrt(fan_in) so activations stay O(1) through the stack
            return (torch.randn(*shape, generator=gen, device=self.device, dtype=torch.float32)
                    / math.sqrt(fan_in)).to(dtype)

        for _ in range(cfg.num_layers):
            self.weights.append({
                "in_norm": torch.ones(h, device=self.device, dtype=dtype),
                "qkv": rand(h, cfg.qkv_size, fan_in=h),  # (hidden, (H + 2 KV) * D)
                "o": rand(cfg.num_heads * d, h, fan_in=cfg.num_heads * d),  # (H * D, hidden)
                "post_attn": torch.ones(h, device=self.device, dtype=dtype),
                "pre_mlp": torch.ones(h, device=self.device, dtype=dtype),
                "gate_up": rand(h, 2 * cfg.intermediate_size, fan_in=h),  # (hidden, 2 I)
                "down": rand(cfg.intermediate_size, h, fan_in=cfg.intermediate_size),  # (I, hidden)
                "post_mlp": torch.ones(h, device=self.device, dtype=dtype),
            })
        self.embed = rand(cfg.vocab_size, h, fan_in=1)  # (vocab, hidden), tied with the LM head
        self.final_norm = torch.ones(h, device=self.device, dtype=dtype)
        # made here, not on first use: a tensor first made inside a CUDA-graph capture is never filled
        self.rope_scale = torch.ones((cfg.num_heads + cfg.num_kv_heads) * d, device=self.device, dtype=dtype)
        if self.attention_fn is None:
            self.attention_fn = default_attention(self.device)

    # -- helpers (real devices) ---------------------------------------------------------------
    def ensure_kv_capacity(self, kv_tokens: int) -> None:
        """Grow the shared packed K/V buffers to hold ``kv_tokens`` keys (real devices only)."""
        if not self.real or (self.k_buf is not None and self.k_buf.shape[0] >= kv_tokens):
            return
        cap = int(kv_tokens * 1.25) + 64
        shape = (cap, self.cfg.num_kv_heads, self.cfg.head_dim)
        # the context the decode rows attend to: drawn from the model's seed, never the global RNG,
        # so a run's sampled tokens do not depend on what else ran in the process first
        gen = self.torch.Generator(device=self.device).manual_seed(self._seed * 1_000_003 + cap)
        self.k_buf = self.torch.randn(shape, generator=gen, device=self.device, dtype=self.dtype)
        self.v_buf = self.torch.randn(shape, generator=gen, device=self.device, dtype=self.dtype)
        logger.info("KV buffers: %d tokens (%.2f GiB each)", cap,
                    self.k_buf.numel() * self.k_buf.element_size() / 2**30)

    def _rms_norm(self, x, w):
        return self.torch.nn.functional.rms_norm(x, (self.cfg.hidden_size,), w, 1e-6)

    def _rope(self, qkv, positions):
        # qkv: (T, (H + 2 KV) * D) -> q (T, H, D), k (T, KV, D), v (T, KV, D) as views.
        # Rotary embedding stand-in: one elementwise kernel over the q and k columns, as vLLM's
        # fused rotary kernel is one launch (positions only shape its cost, not the values here).
        qkv[:, :len(self.rope_scale)].mul_(self.rope_scale)  # the q and k columns
        return self._split_qkv(qkv)

    def _split_qkv(self, qkv):
        # qkv: (T, (H + 2 KV) * D) -> views q (T, H, D), k (T, KV, D), v (T, KV, D)
        cfg = self.cfg
        t = qkv.shape[0]
        nq, nk = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        q = qkv[:, :nq].view(t, cfg.num_heads, cfg.head_dim)
        k = qkv[:, nq:nq + nk].view(t, cfg.num_kv_heads, cfg.head_dim)
        v = qkv[:, nq + nk:].view(t, cfg.num_kv_heads, cfg.head_dim)
        return q, k, v

    def _kv_write(self, k, v, slots):
        self.k_buf.index_copy_(0, slots, k)
        self.v_buf.index_copy_(0, slots, v)

    def _act_mul(self, gu):
        i = self.cfg.intermediate_size
        return self.torch.nn.functional.gelu(gu[:, :i], approximate="tanh") * gu[:, i:]

    # -- the forward --------------------------------------------------------------------------
    def forward(self, dev, batch: ForwardBatch, ranges_for_layer: Callable[[int], object]):
        """Launch one step's decoder layers on ``dev``; ``ranges_for_layer(i)`` where layer ``i`` reads its ranges.

        Returns the hidden states ``(T, hidden)``, None on the simulated device.
        """
        cfg = self.cfg
        tok, kv = batch.num_tokens, batch.kv_tokens
        tens = batch.tensors or {}
        ids, pos = tens.get("input_ids"), tens.get("positions")
        cu_q, cu_k, slots = tens.get("cu_seqlens_q"), tens.get("cu_seqlens_k"), tens.get("slots")
        weights = self.weights or [None] * cfg.num_layers
        h = dev.launch("embed", tokens=tok, fn=lambda: self.embed[ids])  # (T, hidden)
        for i in range(cfg.num_layers):
            w = weights[i]
            window = cfg.layer_window(i)
            with dev.annotate(layer_phase(i)):
                rng = ranges_for_layer(i)
                # keys the layer reads: the kernel skips key tiles below the window; image ranges
                # only widen that for queries inside an image (never a decode token), so the
                # window count stands with or without ranges (as the H200 traces show)
                kv_read = kv if window == 0 else batch.kv_tokens_window
                x = dev.launch("input_norm", tokens=tok, fn=lambda: self._rms_norm(h, w["in_norm"]))
                qkv = dev.launch("qkv_proj", tokens=tok, fn=lambda: x @ w["qkv"])
                qkv3 = dev.launch("rope", tokens=tok, fn=lambda: self._rope(qkv, pos))
                dev.launch("kv_write", tokens=tok, fn=lambda: self._kv_write(qkv3[1], qkv3[2], slots))
                a = dev.launch("attention", tokens=tok, kv_tokens=kv_read, fn=lambda: self.attention_fn(
                    qkv3[0], self.k_buf[:kv], self.v_buf[:kv], cu_q, cu_k, rng, window, batch.seq_lens))  # (T, H, D)
                o = dev.launch("o_proj", tokens=tok, fn=lambda: a.reshape(tok, -1) @ w["o"])
                hx = dev.launch("post_attn_norm", tokens=tok, fn=lambda: self._post_attn(h, o, w))
                gu = dev.launch("gate_up_proj", tokens=tok, fn=lambda: hx[1] @ w["gate_up"])
                m = dev.launch("act_mul", tokens=tok, fn=lambda: self._act_mul(gu))
                d = dev.launch("down_proj", tokens=tok, fn=lambda: m @ w["down"])
                h = dev.launch("post_mlp_norm", tokens=tok,
                               fn=lambda: hx[0] + self._rms_norm(d, w["post_mlp"]))
        return h

    def sample(self, dev, batch: ForwardBatch, h):
        """Launch the final norm, LM head and greedy sampling; int64 ``(num_seqs,)`` ids, None simulated."""
        n = batch.num_seqs
        last = (batch.tensors or {}).get("last_idx")
        y = dev.launch("final_norm", tokens=n, fn=lambda: self._rms_norm(h[last], self.final_norm))
        logits = dev.launch("lm_head", tokens=n, fn=lambda: y @ self.embed.T)  # (num_seqs, vocab)
        return dev.launch("sample", tokens=n, fn=lambda: logits.argmax(dim=-1))

    def _post_attn(self, h, o, w):
        h2 = h + self._rms_norm(o, w["post_attn"])
        return h2, self._rms_norm(h2, w["pre_mlp"])


def host_inputs(q_lens, kv_lens) -> dict:
    """A step's input tensors on the host from per-row query and KV lengths.

    ``q_lens``/``kv_lens``: int arrays ``(num_seqs,)``. Returns CPU tensors ``input_ids`` (T,),
    ``positions`` (T,), ``cu_seqlens_q``/``cu_seqlens_k`` int32 (num_seqs + 1,), ``slots`` (T,)
    (packed KV index of each new key) and ``last_idx`` (num_seqs,) (each row's last token).
    """
    import torch

    q_lens = np.asarray(q_lens, dtype=np.int64)
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    n = len(q_lens)
    cu_q = np.zeros(n + 1, dtype=np.int64)
    cu_k = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(q_lens, out=cu_q[1:])
    np.cumsum(kv_lens, out=cu_k[1:])
    total_q = int(cu_q[-1])
    # position of every query token: (kv_len - q_len) + j for j < q_len, row by row
    row_of_tok = np.repeat(np.arange(n), q_lens)  # (T,)
    j = np.arange(total_q) - cu_q[row_of_tok]
    positions = (kv_lens - q_lens)[row_of_tok] + j  # (T,)
    slots = cu_k[row_of_tok] + positions  # (T,) packed KV index of each new key
    return {"input_ids": torch.zeros(total_q, dtype=torch.int64), "positions": torch.from_numpy(positions),
            "cu_seqlens_q": torch.from_numpy(cu_q.astype(np.int32)),
            "cu_seqlens_k": torch.from_numpy(cu_k.astype(np.int32)), "slots": torch.from_numpy(slots),
            "last_idx": torch.from_numpy(cu_q[1:] - 1)}


def make_batch(dev, model: TransformerStack, q_lens, kv_lens) -> ForwardBatch:
    """Build a step's inputs from per-row query and KV lengths and copy them to ``dev``.

    ``q_lens``/``kv_lens``: int64 arrays ``(num_seqs,)``. Builds the ``host_inputs`` and copies
    each with a pinned non-blocking H2D copy (vLLM's persistent pinned input buffers).
    """
    host = host_inputs(q_lens, kv_lens)
    tensors = {k: dev.copy_h2d(f"h2d:{k}", v, pinned=True, non_blocking=True) for k, v in host.items()}
    return batch_of(model, q_lens, kv_lens, tensors)


def batch_of(model: TransformerStack, q_lens, kv_lens, tensors: dict | None) -> ForwardBatch:
    """The ``ForwardBatch`` of per-row query and KV lengths around input ``tensors`` already on the device
    (``make_batch``'s copies, or a CUDA-graph runner's persistent buffers); grows the KV buffers."""
    q_lens = np.asarray(q_lens, dtype=np.int64)
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    total_q, total_k = int(q_lens.sum()), int(kv_lens.sum())
    window = model.cfg.sliding_window
    kv_window = int(np.minimum(kv_lens, window).sum()) if window else total_k
    model.ensure_kv_capacity(total_k)
    seq_lens = list(zip(q_lens.tolist(), kv_lens.tolist()))
    return ForwardBatch(len(q_lens), total_q, total_k, kv_window, tensors, seq_lens)


def default_attention(device) -> Callable:
    """The lab's prefix attention: the Triton kernel on CUDA, the torch reference elsewhere."""
    import torch

    from labkit.attn import prefix_attention as pa

    if torch.device(device).type == "cuda":
        def attend(q, k, v, cu_q, cu_k, ranges, window, seq_lens):
            return pa.prefix_attention(q, k, v, cu_q, cu_k, ranges, sliding_window=window, seq_lens=seq_lens,
                                       max_seqlen_q=max(a for a, _ in seq_lens))
    else:
        def attend(q, k, v, cu_q, cu_k, ranges, window, seq_lens):
            return pa.prefix_attention_ref(q, k, v, cu_q, cu_k, ranges, sliding_window=window, seq_lens=seq_lens,
                                           compute_dtype=q.dtype)

    return attend
