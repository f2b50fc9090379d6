"""Workload and patch for the next bubble: Gemma-style image features and cached embedding runs
(``patches/vllm-0.33.0-cache-embeds-ranges.diff``, applied in-process).
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterator, Sequence

import torch

from labkit.errors import UsageError

#: instance attribute the in-process patch caches the runs under
CACHE_ATTR = "_embeds_ranges"
#: Gemma-style image placeholder: <start_of_image>, 256 soft tokens, <end_of_image>
GEMMA_PLACEHOLDER_LEN = 258


# --------------------------------------------------------------------------------------
# Workload: per-request lists of image features, as the model runner holds them
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimpleFeature:
    """Stand-in for vLLM's ``MultiModalFeatureSpec`` with the two fields the ranges read."""

    modality: str
    mm_position: object
    identifier: str = ""


def gemma_mask(length: int = GEMMA_PLACEHOLDER_LEN) -> torch.Tensor:
    """``is_embed`` of a Gemma image placeholder: bool ``(length,)``, False at both ends."""
    if length < 3:
        raise ValueError(f"a Gemma placeholder has at least 3 tokens, got {length}")
    mask = torch.ones(length, dtype=torch.bool)
    mask[[0, -1]] = False
    return mask


def make_features(num_requests: int, images: int, *, placeholder_cls: type,
                  feature_factory: Callable[..., object] | None = None, placeholder_len: int = GEMMA_PLACEHOLDER_LEN,
                  text_between: int = 16) -> list[list[object]]:
    """``num_requests`` lists of ``images`` image features each (Gemma-style masks).

    Placeholders sit ``text_between`` text tokens apart; every request has its own
    placeholder objects (as in vLLM, where each request's features are deserialized
    separately). ``feature_factory(modality=, identifier=, mm_position=)`` builds a
    feature (default :class:`SimpleFeature`).
    """
    if num_requests < 0 or images < 0:
        raise UsageError("requests and images must be >= 0")
    factory = feature_factory or SimpleFeature
    out = []
    for r in range(num_requests):
        feats = []
        offset = text_between
        for i in range(images):
            pos = placeholder_cls(offset, placeholder_len, gemma_mask(placeholder_len))
            feats.append(factory(modality="image", identifier=f"req{r}-img{i}", mm_position=pos))
            offset += placeholder_len + text_between
        out.append(feats)
    return out


def random_mask(rng: random.Random, length: int) -> torch.Tensor | None:
    """A random ``is_embed`` for tests: None, all-False, all-True, runs, or random bits."""
    kind = rng.choice(("none", "false", "true", "runs", "bits", "gemma"))
    if kind == "none":
        return None
    if kind == "false":
        return torch.zeros(length, dtype=torch.bool)
    if kind == "true":
        return torch.ones(length, dtype=torch.bool)
    if kind == "gemma" and length >= 3:
        return gemma_mask(length)
    if kind == "runs":
        flags, val = [], rng.random() < 0.5
        while len(flags) < length:
            flags += [val] * rng.randint(1, 6)
            val = not val
        return torch.tensor(flags[:length], dtype=torch.bool)
    return torch.tensor([rng.random() < 0.5 for _ in range(length)], dtype=torch.bool)


def make_random_features(rng: random.Random, *, placeholder_cls: type,
                         feature_factory: Callable[..., object] | None = None, max_requests: int = 6,
                         max_images: int = 6) -> list[list[object]]:
    """Random per-request feature lists (mixed modalities, masks and lengths) for checks."""
    factory = feature_factory or SimpleFeature
    out = []
    for r in range(rng.randint(0, max_requests)):
        feats, offset = [], rng.randint(0, 20)
        for i in range(rng.randint(0, max_images)):
            length = rng.randint(1, 40)
            mask = random_mask(rng, length)
            modality = rng.choice(("image", "image", "video", "audio"))
            feats.append(factory(modality=modality, identifier=f"r{r}i{i}",
                                 mm_position=placeholder_cls(offset, length, mask)))
            offset += length + rng.randint(0, 10)
        out.append(feats)
    return out


# --------------------------------------------------------------------------------------
# The patch: cache the embedding runs on the immutable placeholder
# --------------------------------------------------------------------------------------


def cached_embeds_ranges(cls: type) -> Callable[[], None]:
    """Make ``cls.extract_embeds_range()`` compute its runs once per instance; returns a function that restores it.

    Each call returns a new list of the cached tuples, so callers may mutate what they get.
    """
    original = cls.__dict__.get("extract_embeds_range")
    if original is None:
        raise TypeError(f"{cls.__name__} defines no extract_embeds_range")
    if CACHE_ATTR in cls.__dict__:
        raise RuntimeError(f"{cls.__name__} is already patched")

    def _runs(self) -> tuple[tuple[int, int], ...]:
        return tuple(original(self))

    prop = cached_property(_runs)
    prop.__set_name__(cls, CACHE_ATTR)

    def extract_embeds_range(self) -> list[tuple[int, int]]:
        return list(getattr(self, CACHE_ATTR))

    extract_embeds_range.__doc__ = original.__doc__
    setattr(cls, CACHE_ATTR, prop)
    cls.extract_embeds_range = extract_embeds_range

    def restore() -> None:
        cls.extract_embeds_range = original
        delattr(cls, CACHE_ATTR)

    return restore


@contextlib.contextmanager
def patched_placeholder(cls: type) -> Iterator[type]:
    """Context manager form of :func:`cached_embeds_ranges`."""
    restore = cached_embeds_ranges(cls)
    try:
        yield cls
    finally:
        restore()


def clear_cached_runs(features_per_req: Sequence[Sequence[object]]) -> None:
    """Drop cached runs from every placeholder (to time a cold first step)."""
    for feats in features_per_req:
        for f in feats:
            vars(f.mm_position).pop(CACHE_ATTR, None)
