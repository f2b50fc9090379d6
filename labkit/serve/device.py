"""The device time of an engine step, injected into the simulated clock.

The clock asks a :class:`DeviceTime` for the GPU time of each step from the step's shape alone:
the context length (tokens already in the KV cache) of each decoding request, each prefill
chunk as ``(new tokens, tokens before it)``, and how many images the vision encoder runs. The
lab's model of Gemma-4-E4B on an H100 or H200 lives in :mod:`labkit.serve.device_model` where
it is installed; :func:`load_device_model` returns it, or None with the reason, and nothing
here makes a device up.
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
    cache before the step), per prefill chunk ``(tokens, context before)``, images encoded."""

    decode_context_lens: tuple = ()
    prefill_chunks: tuple = ()
    images_encoded: int = 0

    @property
    def num_requests(self) -> int:
        return len(self.decode_context_lens) + len(self.prefill_chunks)

    @property
    def prefill_tokens(self) -> int:
        return sum(n for n, _ in self.prefill_chunks)


class DeviceTime(Protocol):
    """GPU time of one step, in ns."""

    def __call__(self, decode_context_lens: Sequence[int], prefill_chunks: Sequence[tuple[int, int]],
                 images_encoded: int) -> float: ...


def load_device_model(gpu: str) -> tuple[DeviceTime | None, str]:
    """``(device time, description)`` for ``gpu`` from :mod:`labkit.serve.device_model`, or
    ``(None, why)`` when the module is not installed here."""
    try:
        mod = importlib.import_module("labkit.serve.device_model")
    except ImportError as exc:
        return None, f"no device model: labkit.serve.device_model is not installed ({exc})"
    return mod.make_device_time(gpu), getattr(mod, "describe", lambda g: f"labkit.serve.device_model {g}")(gpu)
