"""The device time of an engine step, injected into the simulated clock.

The clock asks a :class:`DeviceTime` for the GPU time of each step from the step's shape alone:
the context length (tokens already in the KV cache) of each decoding request, each prefill
chunk as ``(new tokens, tokens before it, whether it ends the prompt)``, and how many images the
vision encoder runs. The lab's model of Gemma-4-E4B on an H100 or H200 is
:mod:`labkit.serve.gpu.device_model` (a roofline per part, simulated); :func:`load_device_model`
adapts it to this protocol (a decoding request attends to its context plus its new token), or
returns None with the reason where it is not installed: nothing here makes a device up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol, Sequence

__all__ = ["GPUS", "StepShape", "DeviceTime", "load_device_model"]

#: GPUs the comparison can name
GPUS = ("h100", "h200")


@dataclass(frozen=True)
class StepShape:
    """What one engine step computes: per decoding request its context length (tokens in the KV
    cache before the step), per prefill chunk ``(tokens, context before, ends the prompt)``,
    images encoded."""

    decode_context_lens: tuple = ()
    prefill_chunks: tuple = ()
    images_encoded: int = 0

    @property
    def num_requests(self) -> int:
        return len(self.decode_context_lens) + len(self.prefill_chunks)

    @property
    def prefill_tokens(self) -> int:
        return sum(c[0] for c in self.prefill_chunks)


class DeviceTime(Protocol):
    """GPU time of one step, in ns."""

    def __call__(self, decode_context_lens: Sequence[int], prefill_chunks: Sequence[tuple],
                 images_encoded: int) -> float: ...


def load_device_model(gpu: str) -> tuple[DeviceTime | None, str]:
    """``(device time, description)`` for ``gpu`` from :mod:`labkit.serve.gpu.device_model`, or
    ``(None, why)`` when the module is not installed here."""
    try:
        mod = importlib.import_module("labkit.serve.gpu.device_model")
        arch = importlib.import_module("labkit.serve.gpu.gemma4_arch").GEMMA4_E4B
    except ImportError as exc:
        return None, f"no device model: labkit.serve.gpu.device_model is not installed ({exc})"
    key, peak = mod.get_gpu(gpu)

    def device_time(decode_context_lens, prefill_chunks, images_encoded) -> float:
        chunks = tuple(mod.PrefillChunk(c[0], c[1], bool(c[2]) if len(c) > 2 else False) for c in prefill_chunks)
        batch = mod.StepBatch(decode_contexts=tuple(n + 1 for n in decode_context_lens), prefill_chunks=chunks,
                              images_encoded=images_encoded)
        return mod.step_device_time(arch, key, batch).total_ns

    return device_time, (f"labkit.serve.gpu.device_model: Gemma-4-E4B on the {peak.name} "
                         f"({mod.SOURCE}; roofline per part, no per-step floor)")
