"""CUDA graphs in the mini engine, laid out the way vLLM's V1 runner uses them.

More: docs/reference.md, ``labkit.engine.graphs``.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass

from labkit.engine.config import CUDAGRAPH_MODES
from labkit.engine.model import HEAD_OPS, LAYER_OPS, TAIL_OPS
from labkit.errors import choice
from labkit.trace.capture import layer_phase

logger = logging.getLogger(__name__)

#: a layer's ops before attention, inside attention (eager in piecewise mode) and after it
PRE_ATTN_OPS = ("input_norm", "qkv_proj", "rope")
ATTN_OPS = ("kv_write", "attention")
POST_ATTN_OPS = ("o_proj", "post_attn_norm", "gate_up_proj", "act_mul", "down_proj", "post_mlp_norm")
assert PRE_ATTN_OPS + ATTN_OPS + POST_ATTN_OPS == LAYER_OPS

#: vLLM's default largest capture size
MAX_CAPTURE_SIZE = 512
#: prefix-range strategies whose host work sits inside the forward (no full graph possible)
NOT_CAPTURABLE = {"per_layer": "per_layer prefix ranges copy inside every attention layer (host work in the forward)"}


def capture_sizes(max_size: int = MAX_CAPTURE_SIZE) -> list[int]:
    """vLLM's capture sizes up to ``max_size``: ``[1, 2, 4] + range(8, 256, 8) + range(256, max+1, 16)``."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size]


def padded_size(n: int, sizes: list[int]) -> int | None:
    """The smallest capture size >= ``n`` (None when ``n`` exceeds them all: run eagerly)."""
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


def effective_mode(cudagraph: str, prefix_ranges: str) -> tuple[str, str | None]:
    """``(mode the engine runs, reason for a fallback or None)`` for a configured mode."""
    choice(CUDAGRAPH_MODES, cudagraph, "cudagraph mode")
    if cudagraph == "full" and prefix_ranges in NOT_CAPTURABLE:
        return "piecewise", f"full -> piecewise: {NOT_CAPTURABLE[prefix_ranges]}"
    return cudagraph, None


def piece_ops(num_layers: int, k: int) -> tuple[str, ...]:
    """Op names of piecewise piece ``k`` (0..num_layers): see docs/reference.md."""
    if not 0 <= k <= num_layers:
        raise ValueError(f"piece {k} outside 0..{num_layers}")
    ops: tuple[str, ...] = HEAD_OPS if k == 0 else POST_ATTN_OPS
    return ops + (PRE_ATTN_OPS if k < num_layers else ())


@dataclass(frozen=True)
class StepGraphs:
    """How one step runs: ``mode`` ``full``/``piecewise``/``eager``, padded token and sequence counts."""

    mode: str
    tokens: int
    seqs: int


def plan_step(mode: str, num_tokens: int, num_seqs: int, token_sizes: list[int],
              seq_sizes: list[int] | None = None) -> StepGraphs:
    """How one step runs under effective ``mode`` (``none``/``piecewise``/``full``).

    ``token_sizes``: the captured piece sizes (tokens); ``seq_sizes``: the captured head and
    full-graph sizes (sequences; default ``token_sizes``). A step too large for them runs eagerly.
    """
    seq_sizes = token_sizes if seq_sizes is None else seq_sizes
    if mode == "none":
        return StepGraphs("eager", num_tokens, num_seqs)
    uniform_decode = num_tokens == num_seqs
    if mode == "full" and uniform_decode:
        b = padded_size(num_seqs, seq_sizes)
        if b is not None:
            return StepGraphs("full", b, b)
    t = padded_size(num_tokens, token_sizes)
    s = padded_size(num_seqs, seq_sizes)
    if t is None or s is None:
        return StepGraphs("eager", num_tokens, num_seqs)
    return StepGraphs("piecewise", t, s)


def sizes_up_to(sizes: list[int], n: int) -> list[int]:
    """The capture sizes needed for batches up to ``n`` (through the size ``n`` pads to)."""
    top = padded_size(n, sizes) or sizes[-1]
    return [s for s in sizes if s <= top]


def layer_kv(model_cfg, layer: int, batch) -> int:
    """Keys layer ``layer``'s attention reads (the sliding-window count on windowed layers)."""
    return batch.kv_tokens if model_cfg.layer_window(layer) == 0 else batch.kv_tokens_window


class SimGraphRunner:
    """CUDA-graph capture and replay on the simulated device for a model config and mode.

    ``with_ranges``: the engine has a prefix-range strategy (full graphs copy its tensor into a
    persistent buffer before each replay). ``capture(dev, max_tokens, max_seqs)`` captures every
    graph for every capture size up to the padded maxima (once, before measuring);
    ``forward``/``sample`` replay them for one step (falling back to the eager model for steps
    larger than the largest capture size).
    """

    def __init__(self, model, mode: str, *, with_ranges: bool = False, sizes: list[int] | None = None) -> None:
        if mode not in ("piecewise", "full"):
            raise ValueError(f"SimGraphRunner needs piecewise or full, got {mode!r}")
        self.model = model
        self.cfg = model.cfg
        self.mode = mode
        self.with_ranges = with_ranges
        self.sizes = sizes or capture_sizes()
        self.last: StepGraphs | None = None
        self.captured = 0
        self.token_sizes: list[int] = []
        self.seq_sizes: list[int] = []

    def _graph_ops(self, kind: str, k: int = 0) -> tuple[str, ...]:
        n = self.cfg.num_layers
        if kind == "full":
            return HEAD_OPS + LAYER_OPS * n + TAIL_OPS
        if kind == "head":
            return TAIL_OPS
        return piece_ops(n, k)

    def capture(self, dev, max_tokens: int, max_seqs: int, *, decode_only: bool = False) -> int:
        """Capture all graphs up to the padded ``max_tokens``/``max_seqs``; returns how many.

        ``decode_only``: every step will be a uniform decode step, so ``full`` mode needs no
        pieces (a step the full graphs cannot take then runs eagerly).
        """
        pieces = not (decode_only and self.mode == "full")
        self.token_sizes = sizes_up_to(self.sizes, max_tokens) if pieces else []
        self.seq_sizes = sizes_up_to(self.sizes, max_seqs)
        top_t, top_s = (self.token_sizes or [0])[-1], self.seq_sizes[-1]
        count = 0
        with dev.annotate("cudagraph_capture"):
            for b in reversed(self.token_sizes):  # largest first, as vLLM
                for k in range(self.cfg.num_layers + 1):
                    dev.capture(f"piece_{k}@{b}", self._graph_ops("piece", k))
                    count += 1
            for b in reversed(self.seq_sizes):
                if pieces:
                    dev.capture(f"head@{b}", self._graph_ops("head"))
                    count += 1
                if self.mode == "full":
                    dev.capture(f"full@{b}", self._graph_ops("full"))
                    count += 1
        logger.info("captured %d graphs (%s, sizes up to %d tokens / %d seqs)", count, self.mode, top_t, top_s)
        self.captured = count
        return count

    # -- one step ---------------------------------------------------------------------------------
    def _piece(self, k: int, t: int) -> list[tuple[str, int, int]]:
        return [(op, t, 0) for op in piece_ops(self.cfg.num_layers, k)]

    def _full(self, batch, b: int) -> list[tuple[str, int, int]]:
        pad = b - batch.num_seqs  # padded rows: one query over one key each
        ops = [(op, b, 0) for op in HEAD_OPS]
        for i in range(self.cfg.num_layers):
            kv = layer_kv(self.cfg, i, batch) + pad
            ops += [(op, b, kv if op == "attention" else 0) for op in LAYER_OPS]
        return ops + [(op, b, 0) for op in TAIL_OPS]

    def forward(self, dev, batch, ranges_for_layer):
        """Replay one step's forward (or run it eagerly when too large); returns None (simulated)."""
        plan = plan_step(self.mode, batch.num_tokens, batch.num_seqs, self.token_sizes, self.seq_sizes)
        self.last = plan
        if plan.mode == "eager":
            return self.model.forward(dev, batch, ranges_for_layer)
        if plan.mode == "full":
            if self.with_ranges:
                # the step's prefix-range tensor goes into the graph's persistent buffer first
                ranges_for_layer(0)
                dev.launch("copy_prefix_ranges", tokens=batch.num_seqs)
            dev.replay(f"full@{plan.tokens}", self._full(batch, plan.tokens))
            return None
        t = plan.tokens
        n = self.cfg.num_layers
        dev.replay(f"piece_0@{t}", self._piece(0, t))
        for i in range(n):
            with dev.annotate(layer_phase(i)):
                ranges_for_layer(i)  # eager, between pieces: a per-layer strategy copies here
                dev.launch("kv_write", tokens=batch.num_tokens)
                dev.launch("attention", tokens=batch.num_tokens, kv_tokens=layer_kv(self.cfg, i, batch))
                dev.replay(f"piece_{i + 1}@{t}", self._piece(i + 1, t))
        return None

    def sample(self, dev, batch, h):
        """Replay the head graph (inside the full graph already in ``full`` steps); returns None."""
        plan = self.last
        if plan is None or plan.mode == "eager":
            return self.model.sample(dev, batch, h)
        if plan.mode == "piecewise":
            dev.replay(f"head@{plan.seqs}", [(op, plan.seqs, 0) for op in TAIL_OPS])
        return None


def replays_per_step(mode: str, num_layers: int) -> int:
    """Graph replays in one decode step: ``full`` 1, ``piecewise`` ``num_layers + 2``, ``none`` 0."""
    return {"none": 0, "piecewise": num_layers + 2, "full": 1}[mode]
