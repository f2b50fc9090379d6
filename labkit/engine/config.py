"""Engine and model configurations: frozen dataclasses with named presets.

More: docs/reference.md, ``labkit.engine.config``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from labkit.errors import UsageError, choice
from labkit.facts import GEMMA4_E4B as A
from labkit.facts import GLOBAL


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the transformer stack (sizes in elements; ``sliding_window`` in tokens, 0 = none).

    Layer ``i`` is global when ``global_every`` > 0 and ``(i + 1) % global_every == 0``.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    sliding_window: int = 0
    global_every: int = 0

    def __post_init__(self) -> None:
        for key in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                    "intermediate_size", "vocab_size"):
            if getattr(self, key) < 1:
                raise UsageError(f"model {self.name}: {key} must be >= 1")
        if self.num_heads % self.num_kv_heads:
            raise UsageError(f"model {self.name}: num_heads must be a multiple of num_kv_heads")
        if self.sliding_window < 0 or self.global_every < 0:
            raise UsageError(f"model {self.name}: sliding_window and global_every must be >= 0")

    def layer_window(self, layer: int) -> int:
        """Sliding window of layer ``layer`` in tokens (0 = full attention)."""
        if self.global_every and (layer + 1) % self.global_every == 0:
            return 0
        return self.sliding_window

    @property
    def qkv_size(self) -> int:
        return (self.num_heads + 2 * self.num_kv_heads) * self.head_dim

    def with_(self, **changes) -> "ModelConfig":
        return replace(self, **changes)


MODEL_PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig("tiny", 2, 64, 4, 2, 16, 128, 256, sliding_window=0),
    "small": ModelConfig("small", 4, 256, 4, 2, 64, 512, 1024, sliding_window=64, global_every=2),
    "gemma4-e4b-like": ModelConfig("gemma4-e4b-like", A.num_layers, A.hidden_size, A.num_heads, A.num_kv_heads,
                                   A.head_dim, A.intermediate_size, A.vocab_size, sliding_window=A.sliding_window,
                                   global_every=A.layer_types.index(GLOBAL) + 1),
}


def get_model_config(name: str) -> ModelConfig:
    """The model preset ``name``; ``UsageError`` names the choices."""
    return choice(MODEL_PRESETS, name, "model preset")


#: prefix-range choice meaning "not a prefix-LM model: no image ranges, no copies"
NO_PREFIX = "none"

#: CUDA-graph modes, as vLLM's ``cudagraph_mode``: ``none`` (eager), ``piecewise`` (graphs split
#: at attention), ``full`` (vLLM's FULL_AND_PIECEWISE: one graph per uniform decode step,
#: piecewise for prefill and mixed steps)
CUDAGRAPH_MODES = ("none", "piecewise", "full")


@dataclass(frozen=True)
class EngineConfig:
    """One engine run.

    ``workload``: a ``labkit.mm.workload`` preset; ``num_requests`` overrides its request count.
    ``placeholder``: ``tensor``/``list``/``fast``; ``scheduling``: a scheduler strategy;
    ``prefix_ranges``: a prefix-range strategy or ``"none"``. ``async_scheduling``: the host
    schedules step n+1 while the device runs step n. ``start_in_decode``: requests begin with
    their prompt already computed (steady decode, as in the long tail of #40143's benchmark).
    ``max_num_batched_tokens``/``max_num_seqs``: scheduler budgets. ``cudagraph``: one of
    ``CUDAGRAPH_MODES``.
    """

    model: str = "tiny"
    workload: str = "tiny"
    num_requests: int | None = None
    placeholder: str = "list"
    scheduling: str = "loop"
    prefix_ranges: str = NO_PREFIX
    async_scheduling: bool = True
    start_in_decode: bool = True
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    seed: int = 0
    cudagraph: str = "none"

    def __post_init__(self) -> None:
        choice(CUDAGRAPH_MODES, self.cudagraph, "cudagraph mode")

    def with_(self, **changes) -> "EngineConfig":
        return replace(self, **changes)

    def variant_name(self) -> str:
        """Short label: ``tensor/loop/none/async``, with ``/piecewise`` or ``/full`` under CUDA graphs."""
        mode = "async" if self.async_scheduling else "sync"
        name = f"{self.placeholder}/{self.scheduling}/{self.prefix_ranges}/{mode}"
        return name if self.cudagraph == "none" else f"{name}/{self.cudagraph}"
