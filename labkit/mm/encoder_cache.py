"""The encoder cache: which encoder outputs are kept, who references them, what gets evicted.

Same semantics as vLLM's ``EncoderCacheManager`` (v0.20.0), counted in embeddings.

More: docs/reference.md, ``labkit.mm.encoder_cache``.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["EncoderCacheManager"]


class EncoderCacheManager:
    """Reference-counted encoder-output cache of ``cache_size`` embeddings."""

    def __init__(self, cache_size: int) -> None:
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        self.cache_size = cache_size
        self.num_free_slots = cache_size
        self.num_freeable_slots = cache_size
        self.cached: dict[str, set[str]] = {}
        self.freeable: OrderedDict[str, int] = OrderedDict()
        self.freed: list[str] = []

    def reset(self) -> None:
        """Drop everything: an empty cache of the same size (nothing reported as freed)."""
        self.num_free_slots = self.cache_size
        self.num_freeable_slots = self.cache_size
        self.cached.clear()
        self.freeable.clear()
        self.freed.clear()

    def check_and_update_cache(self, request, input_id: int) -> bool:
        """True if item ``input_id`` is cached; then ``request`` references it (rescued from freeable)."""
        mm_hash = request.mm_features[input_id].identifier
        refs = self.cached.get(mm_hash)
        if refs is None:
            return False
        if not refs:
            # was freeable: it is in use again
            num_embeds = self.freeable.pop(mm_hash)
            self.num_freeable_slots -= num_embeds
        refs.add(request.request_id)
        return True

    def can_allocate(self, request, input_id: int, encoder_compute_budget: int, num_embeds_to_schedule: int) -> bool:
        """Whether item ``input_id`` fits the compute budget and (after evictions) the cache.

        ``num_embeds_to_schedule`` are embeddings already chosen this step but not yet
        allocated. May evict freeable entries, oldest first (they are then reported by
        ``get_freed_mm_hashes``).
        """
        num_embeds = request.get_num_encoder_embeds(input_id)
        if num_embeds > encoder_compute_budget:
            return False
        num_embeds += num_embeds_to_schedule
        if num_embeds <= self.num_free_slots:
            return True
        if num_embeds > self.num_freeable_slots:
            return False
        while num_embeds > self.num_free_slots:
            mm_hash, size = self.freeable.popitem(last=False)
            del self.cached[mm_hash]
            self.freed.append(mm_hash)
            self.num_free_slots += size
        return True

    def allocate(self, request, input_id: int) -> None:
        """Reserve slots for item ``input_id`` and reference it from ``request``."""
        mm_hash = request.mm_features[input_id].identifier
        num_embeds = request.get_num_encoder_embeds(input_id)
        if num_embeds > self.num_free_slots or num_embeds > self.num_freeable_slots:
            raise RuntimeError(
                f"encoder cache has {self.num_free_slots} free slots, {mm_hash} needs {num_embeds}"
            )
        self.cached.setdefault(mm_hash, set()).add(request.request_id)
        self.num_free_slots -= num_embeds
        self.num_freeable_slots -= num_embeds

    def get_cached_input_ids(self, request) -> set[int]:
        """Indices of ``request``'s cached items, a set built in vLLM's order (callers rely on it)."""
        cached = self.cached
        return {i for i, f in enumerate(request.mm_features) if f.identifier in cached}

    def free_encoder_input(self, request, input_id: int) -> None:
        """Drop ``request``'s reference to item ``input_id``; unreferenced entries become freeable."""
        mm_hash = request.mm_features[input_id].identifier
        refs = self.cached.get(mm_hash)
        if not refs:
            return
        refs.discard(request.request_id)
        if not refs:
            num_embeds = request.get_num_encoder_embeds(input_id)
            self.freeable[mm_hash] = num_embeds
            self.num_freeable_slots += num_embeds

    def free(self, request) -> None:
        """Drop every reference ``request`` holds, in the set's iteration order (as vLLM)."""
        for input_id in self.get_cached_input_ids(request):
            self.free_encoder_input(request, input_id)

    def get_freed_mm_hashes(self) -> list[str]:
        """Identifiers evicted since the last call (each reported once)."""
        freed, self.freed = self.freed, []
        return freed
