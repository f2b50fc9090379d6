"""Placeholder ranges: where one multimodal item's embeddings sit in a prompt (three variants by name).

More: docs/reference.md, ``labkit.mm.placeholder``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate

import torch

from labkit.errors import choice

__all__ = ["TensorPlaceholderRange", "ListPlaceholderRange", "FastPlaceholderRange", "PLACEHOLDER_VARIANTS",
           "get_placeholder_class", "masks_equal"]


def masks_equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """True when both masks are None, or both are tensors of equal shape and values."""
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(torch.equal(a, b))


def _torch_embed_runs(offset: int, is_embed: torch.Tensor | None, length: int) -> list[tuple[int, int]]:
    """Runs of True in ``is_embed`` as inclusive absolute ``(start, end)`` pairs, via torch ops."""
    if is_embed is None:
        return [(offset, offset + length - 1)]
    mask = is_embed.to(torch.int8)  # (length,)
    zero = mask.new_zeros(1)
    rises = torch.nonzero(torch.diff(mask, prepend=zero) == 1).flatten()  # run starts
    falls = torch.nonzero(torch.diff(mask, append=zero) == -1).flatten()  # run ends (inclusive)
    pairs = torch.stack((rises, falls), dim=1) + offset  # (num_runs, 2)
    return [(s, e) for s, e in pairs.tolist()]


def _extract_embeds_range(self) -> list[tuple[int, int]]:
    """Inclusive absolute ``(start, end)`` per run of embed positions (torch ops on each call)."""
    return _torch_embed_runs(self.offset, self.is_embed, self.length)


def _eq(self, other: object) -> bool:
    # vLLM's rule: same class, same (offset, length), masks both None or equal.
    return (self.__class__ is other.__class__ and (self.offset, self.length) == (other.offset, other.length)
            and masks_equal(self.is_embed, other.is_embed))


@dataclass(frozen=True)
class TensorPlaceholderRange:
    """vLLM's ``PlaceholderRange`` before #40143: cumsum cached as a CPU tensor, read with ``int()``."""

    offset: int
    length: int
    is_embed: torch.Tensor | None = None

    @cached_property
    def embeds_cumsum(self) -> torch.Tensor | None:
        """Inclusive cumsum of ``is_embed`` (int64 tensor, shape ``(length,)``) or None."""
        return None if self.is_embed is None else self.is_embed.cumsum(dim=0)

    def get_num_embeds(self) -> int:
        """Number of encoder embeddings this item needs (raises IndexError on an empty mask)."""
        if self.embeds_cumsum is None:
            return self.length
        return int(self.embeds_cumsum[-1])

    def get_embeds_indices_in_range(self, start_idx: int, end_idx: int) -> tuple[int, int]:
        """Half-open slice of the encoder output for placeholder-relative ``[start_idx, end_idx)`` (0 wraps)."""
        if self.embeds_cumsum is None:
            return start_idx, end_idx
        embeds_start = int(self.embeds_cumsum[start_idx - 1]) if start_idx > 0 else 0
        embeds_end = int(self.embeds_cumsum[end_idx - 1])
        return embeds_start, embeds_end

    extract_embeds_range = _extract_embeds_range

    __eq__ = _eq


@dataclass(frozen=True)
class ListPlaceholderRange:
    """vLLM's ``PlaceholderRange`` after #40143: cumsum cached as a Python list."""

    offset: int
    length: int
    is_embed: torch.Tensor | None = None

    @cached_property
    def embeds_cumsum(self) -> list[int] | None:
        """Inclusive cumsum of ``is_embed`` as a Python list (length ``length``) or None."""
        return None if self.is_embed is None else self.is_embed.cumsum(dim=0).tolist()

    def get_num_embeds(self) -> int:
        """Number of encoder embeddings this item needs (0 for an empty mask)."""
        if self.embeds_cumsum is None:
            return self.length
        return self.embeds_cumsum[-1] if self.embeds_cumsum else 0

    def get_embeds_indices_in_range(self, start_idx: int, end_idx: int) -> tuple[int, int]:
        """Half-open slice of this item's encoder output covering placeholder-relative ``[start_idx, end_idx)``."""
        if self.embeds_cumsum is None:
            return start_idx, end_idx
        embeds_start = self.embeds_cumsum[start_idx - 1] if start_idx > 0 else 0
        embeds_end = self.embeds_cumsum[end_idx - 1] if end_idx > 0 else 0
        return embeds_start, embeds_end

    extract_embeds_range = _extract_embeds_range

    __eq__ = _eq


class FastPlaceholderRange:
    """The ``list`` variant with everything precomputed at construction (treat as immutable)."""

    __slots__ = ("offset", "length", "is_embed", "embeds_cumsum", "_num_embeds", "_cum0", "_runs")

    def __init__(self, offset: int, length: int, is_embed: torch.Tensor | None = None) -> None:
        self.offset = offset
        self.length = length
        self.is_embed = is_embed
        if is_embed is None:
            self.embeds_cumsum = None
            self._num_embeds = length
            self._cum0 = None
            self._runs = ((offset, offset + length - 1),)
            return
        flags = is_embed.tolist()  # list[bool], length ``length``
        cumsum = list(accumulate(int(f) for f in flags))
        self.embeds_cumsum = cumsum
        self._num_embeds = cumsum[-1] if cumsum else 0
        self._cum0 = [0, *cumsum]  # _cum0[k] = embeds among the first k positions
        runs = []
        start = None
        for i, f in enumerate(flags):
            if f and start is None:
                start = i
            elif not f and start is not None:
                runs.append((offset + start, offset + i - 1))
                start = None
        if start is not None:
            runs.append((offset + start, offset + len(flags) - 1))
        self._runs = tuple(runs)

    def get_num_embeds(self) -> int:
        """Number of encoder embeddings this item needs (0 for an empty mask)."""
        return self._num_embeds

    def get_embeds_indices_in_range(self, start_idx: int, end_idx: int) -> tuple[int, int]:
        """Half-open slice of this item's encoder output covering placeholder-relative ``[start_idx, end_idx)``."""
        cum0 = self._cum0
        if cum0 is None:
            return start_idx, end_idx
        # Same results as "list": k <= 0 gives 0, k > length raises IndexError.
        return (cum0[start_idx] if start_idx > 0 else 0, cum0[end_idx] if end_idx > 0 else 0)

    def extract_embeds_range(self) -> list[tuple[int, int]]:
        """Inclusive absolute ``(start, end)`` per run of embed positions (a copy of a cached tuple)."""
        return list(self._runs)

    __eq__ = _eq

    def __hash__(self) -> int:
        # as vLLM's frozen dataclass: fields hashed, the mask tensor by identity
        return hash((self.offset, self.length, self.is_embed))

    def __repr__(self) -> str:
        return f"FastPlaceholderRange(offset={self.offset}, length={self.length}, is_embed={self.is_embed!r})"


#: name -> placeholder-range class; all share the constructor ``cls(offset, length, is_embed=None)``
PLACEHOLDER_VARIANTS: dict[str, type] = {
    "tensor": TensorPlaceholderRange,
    "list": ListPlaceholderRange,
    "fast": FastPlaceholderRange,
}


def get_placeholder_class(variant: str) -> type:
    """The placeholder class registered as ``variant``; ValueError names the choices."""
    return choice(PLACEHOLDER_VARIANTS, variant, "placeholder variant", ValueError)
