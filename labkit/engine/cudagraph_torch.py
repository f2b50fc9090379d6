"""CUDA-graph capture and replay of the mini engine's model on a real GPU (``torch.cuda.CUDAGraph``).

More: docs/reference.md, ``labkit.engine.cudagraph_torch``.
"""

from __future__ import annotations

import logging

import numpy as np

from labkit.engine.graphs import StepGraphs, capture_sizes, plan_step, sizes_up_to
from labkit.engine.model import batch_of, host_inputs
from labkit.trace.capture import layer_phase

logger = logging.getLogger(__name__)

WARMUP_CALLS = 2  #: eager calls of each graph's function before its capture


class TorchGraphs:
    """The CUDA-graph primitives the runner uses: a memory pool, capture, synchronize."""

    def __init__(self, torch) -> None:
        self.torch = torch

    def pool(self):
        return self.torch.cuda.graph_pool_handle()

    def capture(self, fn, pool):
        """Warm ``fn`` up on a side stream, then capture it; returns ``(graph, fn's outputs)``."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = fn()
        return graph, out

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()


class CudaGraphRunner:
    """Piecewise or full CUDA graphs for a real ``TransformerStack`` on a CUDA device.

    Same interface as ``labkit.engine.graphs.SimGraphRunner``: ``capture(dev, max_tokens,
    max_seqs)``, ``forward(dev, batch, ranges_for_layer)``, ``sample(dev, batch, h)``; counts
    ``captured`` graphs and ``replays``. ``max_ranges``: widest prefix-range row of the workload.
    ``graphs``: the capture primitives (``TorchGraphs``; tests on a CPU pass a stand-in that
    re-runs the captured function on replay, to check the buffers and padding without a GPU).
    """

    def __init__(self, model, mode: str, *, with_ranges: bool = False, max_ranges: int = 0,
                 kv_reserve: int = 0, sizes: list[int] | None = None, graphs=None) -> None:
        if mode not in ("piecewise", "full"):
            raise ValueError(f"CudaGraphRunner needs piecewise or full, got {mode!r}")
        if not model.real or (graphs is None and model.device.type != "cuda"):
            raise ValueError("CUDA graphs need the model on a CUDA device")
        import torch

        self.torch = torch
        self.graphs = graphs or TorchGraphs(torch)
        self.model = model
        self.cfg = model.cfg
        self.mode = mode
        self.with_ranges = with_ranges and max_ranges > 0
        self.max_ranges = max(1, int(max_ranges))
        self.kv_reserve = int(kv_reserve)
        self.sizes = sizes or capture_sizes()
        self.captured = 0
        self.replays = 0
        self.last: StepGraphs | None = None
        self._pieces: dict[int, list] = {}  # token size -> [(graph, outputs)] per piece
        self._heads: dict[int, tuple] = {}  # seq size -> (graph, sampled ids)
        self._full: dict[int, tuple] = {}  # seq size -> (graph, sampled ids)
        self._kv_ptr = None
        self._prepared = None  # the batch ``prepare`` built into the buffers, until its replay
        self.token_sizes: list[int] = []
        self.seq_sizes: list[int] = []

    # -- buffers ----------------------------------------------------------------------------------
    def _alloc(self, max_t: int, max_s: int) -> None:
        torch, m, cfg = self.torch, self.model, self.cfg
        dev = m.device
        self.ids = torch.zeros(max_t, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(max_t, dtype=torch.int64, device=dev)
        self.slots = torch.zeros(max_t, dtype=torch.int64, device=dev)
        self.cu_q = torch.arange(max_s + 1, dtype=torch.int32, device=dev)
        self.cu_k = torch.arange(max_s + 1, dtype=torch.int32, device=dev)
        self.last_idx = torch.arange(max_s, dtype=torch.int64, device=dev)
        self.ranges = torch.zeros((max_s, self.max_ranges, 2), dtype=torch.int32, device=dev)
        self.attn_out = torch.zeros((max_t, cfg.num_heads * cfg.head_dim), dtype=m.dtype, device=dev)
        self.h_head = torch.zeros((max_t, cfg.hidden_size), dtype=m.dtype, device=dev)

    def _graph(self, fn):
        graph, out = self.graphs.capture(fn, self.pool)
        self.captured += 1
        return graph, out

    # -- graph bodies (read persistent buffers, return graph-owned outputs) -------------------------
    def _post_attn(self, i: int, h, t: int):
        m, w = self.model, self.model.weights[i]
        o = self.attn_out[:t] @ w["o"]
        h2, hx = m._post_attn(h, o, w)
        gu = hx @ w["gate_up"]
        d = m._act_mul(gu) @ w["down"]
        return h2 + m._rms_norm(d, w["post_mlp"])  # (t, hidden)

    def _pre_attn(self, i: int, h):
        m, w = self.model, self.model.weights[i]
        qkv = m._rms_norm(h, w["in_norm"]) @ w["qkv"]  # (t, (H + 2 KV) * D)
        m._rope(qkv, None)
        return qkv

    def _piece_fn(self, k: int, t: int, prev):
        n = self.cfg.num_layers

        def run():
            h = self.model.embed[self.ids[:t]] if k == 0 else self._post_attn(k - 1, prev()[0], t)
            return (h, self._pre_attn(k, h)) if k < n else (h, None)
        return run

    def _head_fn(self, s: int):
        m = self.model

        def run():
            y = m._rms_norm(self.h_head[self.last_idx[:s]], m.final_norm)
            return (y @ m.embed.T).argmax(dim=-1)  # (s,)
        return run

    def _full_fn(self, b: int):
        m, cfg = self.model, self.cfg
        cap = m.k_buf.shape[0]
        # host lengths for the kernel's argument check only (docs/reference.md)
        fake_lens = [(1, 1)] * (b - 1) + [(1, cap - (b - 1))]
        rng = self.ranges[:b] if self.with_ranges else None

        def run():
            h = m.embed[self.ids[:b]]
            for i in range(cfg.num_layers):
                qkv = self._pre_attn(i, h)
                q, k, v = m._split_qkv(qkv)
                m._kv_write(k, v, self.slots[:b])
                a = m.attention_fn(q, m.k_buf, m.v_buf, self.cu_q[:b + 1], self.cu_k[:b + 1], rng,
                                   cfg.layer_window(i), fake_lens)
                self.attn_out[:b].copy_(a.reshape(b, -1))
                h = self._post_attn(i, h, b)
            self.h_head[:b].copy_(h)
            return self._head_fn(b)()
        return run

    # -- capture ------------------------------------------------------------------------------------
    def capture(self, dev, max_tokens: int, max_seqs: int, *, decode_only: bool = False) -> int:
        """Capture every graph up to the padded maxima (once, before measuring); returns how many."""
        m = self.model
        pieces_too = not (decode_only and self.mode == "full")
        self.token_sizes = sizes_up_to(self.sizes, max_tokens) if pieces_too else []
        self.seq_sizes = sizes_up_to(self.sizes, max_seqs)
        top_t, top_s = max(self.token_sizes + self.seq_sizes), self.seq_sizes[-1]
        m.ensure_kv_capacity(max(self.kv_reserve, top_t + 1))
        self._kv_ptr = m.k_buf.data_ptr()
        self._alloc(top_t, top_s)
        self.pool = self.graphs.pool()
        with dev.annotate("cudagraph_capture"):
            for t in reversed(self.token_sizes):
                pieces: list = []
                for k in range(self.cfg.num_layers + 1):
                    prev = (lambda p=pieces, j=k - 1: p[j][1]) if k else None
                    pieces.append(self._graph(self._piece_fn(k, t, prev)))
                self._pieces[t] = pieces
            for s in reversed(self.seq_sizes):
                if pieces_too:
                    self._heads[s] = self._graph(self._head_fn(s))
                if self.mode == "full":
                    self._full[s] = self._graph(self._full_fn(s))
        self.graphs.synchronize()
        logger.info("captured %d CUDA graphs (%s, up to %d tokens / %d seqs)", self.captured, self.mode, top_t, top_s)
        return self.captured

    # -- one step -----------------------------------------------------------------------------------
    def _check_kv(self) -> None:
        if self.model.k_buf.data_ptr() != self._kv_ptr:
            raise RuntimeError("the KV buffers moved after the CUDA graphs were captured (kv_reserve too small)")

    def _fill(self, buf, src) -> None:
        if buf.is_cuda:
            src = src.pin_memory()  # (n,) staging from the caching host allocator: safe to drop after the call
        buf[:src.shape[0]].copy_(src, non_blocking=True)

    def _fill_padded(self, seq_lens, b: int) -> None:
        """Fill the persistent input buffers for a full graph of ``b`` rows: ``seq_lens`` then padding."""
        n = len(seq_lens)
        q_lens = np.array([a for a, _ in seq_lens] + [1] * (b - n), dtype=np.int64)
        kv_lens = np.array([c for _, c in seq_lens] + [1] * (b - n), dtype=np.int64)
        host = host_inputs(q_lens, kv_lens)  # padded rows: one query over one new key each
        for name, buf in self._buffers():
            self._fill(buf, host[name])

    def _buffers(self):
        return (("input_ids", self.ids), ("positions", self.positions), ("slots", self.slots),
                ("cu_seqlens_q", self.cu_q), ("cu_seqlens_k", self.cu_k), ("last_idx", self.last_idx))

    def prepare(self, dev, q_lens, kv_lens):
        """A full-graph step's inputs built once, straight into the graph's buffers; None for other steps.

        ``q_lens``/``kv_lens``: int64 ``(num_seqs,)``. The returned batch's tensors are views of the
        buffers' real rows (what ``make_batch`` would have copied), so ``forward`` copies nothing more.
        """
        if not self.captured:
            return None
        q_lens, kv_lens = np.asarray(q_lens, dtype=np.int64), np.asarray(kv_lens, dtype=np.int64)
        n, t = len(q_lens), int(q_lens.sum())
        plan = plan_step(self.mode, t, n, self.token_sizes, self.seq_sizes)
        if plan.mode != "full":
            return None
        self._fill_padded(list(zip(q_lens.tolist(), kv_lens.tolist())), plan.tokens)
        rows = {"input_ids": t, "positions": t, "slots": t, "cu_seqlens_q": n + 1, "cu_seqlens_k": n + 1,
                "last_idx": n}
        batch = batch_of(self.model, q_lens, kv_lens, {k: buf[:rows[k]] for k, buf in self._buffers()})
        self._prepared = batch
        return batch

    def forward(self, dev, batch, ranges_for_layer):
        """Replay one step's graphs (eager model for steps beyond the capture sizes); returns the hidden states."""
        plan = plan_step(self.mode, batch.num_tokens, batch.num_seqs, self.token_sizes, self.seq_sizes)
        self.last = plan
        if plan.mode == "eager":
            return self.model.forward(dev, batch, ranges_for_layer)
        self._check_kv()
        n = batch.num_seqs
        if plan.mode == "full":
            b = plan.tokens
            if batch is not self._prepared:  # inputs not built by ``prepare``: into the buffers now
                self._fill_padded(batch.seq_lens, b)
            self._prepared = None
            if self.with_ranges:
                rng = ranges_for_layer(0)  # (n, R, 2) device tensor of this step
                self.ranges[:b].zero_()
                if rng is not None and rng.shape[1]:
                    if rng.shape[1] > self.max_ranges:
                        raise RuntimeError(f"{rng.shape[1]} prefix ranges per row exceed the captured "
                                           f"{self.max_ranges}")
                    self.ranges[:n, :rng.shape[1]].copy_(rng)
            graph, sampled = self._full[b]
            graph.replay()
            self.replays += 1
            self._sampled = sampled
            return None
        t = plan.tokens
        tens = batch.tensors
        self.ids[:batch.num_tokens].copy_(tens["input_ids"])
        pieces = self._pieces[t]
        m, cfg = self.model, self.cfg
        pieces[0][0].replay()
        self.replays += 1
        for i in range(cfg.num_layers):
            with dev.annotate(layer_phase(i)):
                rng = ranges_for_layer(i)  # eager, between pieces: a per-layer strategy copies here
                qkv = pieces[i][1][1][:batch.num_tokens]
                q, k, v = m._split_qkv(qkv)
                m._kv_write(k, v, tens["slots"])
                kv = batch.kv_tokens
                a = m.attention_fn(q, m.k_buf[:kv], m.v_buf[:kv], tens["cu_seqlens_q"], tens["cu_seqlens_k"], rng,
                                   cfg.layer_window(i), batch.seq_lens)
                self.attn_out[:batch.num_tokens].copy_(a.reshape(batch.num_tokens, -1))
                pieces[i + 1][0].replay()
                self.replays += 1
        return pieces[-1][1][0]  # (t, hidden), padded rows last

    def sample(self, dev, batch, h):
        """Replay the head graph (already inside a full graph); returns the sampled ids ``(num_seqs,)``."""
        plan = self.last
        n = batch.num_seqs
        if plan is None or plan.mode == "eager":
            return self.model.sample(dev, batch, h)
        if plan.mode == "full":
            return self._sampled[:n]
        self.h_head[:h.shape[0]].copy_(h)
        self.last_idx[:n].copy_(batch.tensors["last_idx"])
        self.last_idx[n:plan.seqs].zero_()
        graph, sampled = self._heads[plan.seqs]
        graph.replay()
        self.replays += 1
        return sampled[:n]
