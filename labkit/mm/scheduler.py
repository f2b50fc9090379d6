"""Encoder-input scheduling: which images a request's next tokens need encoded this step.

More: docs/reference.md, ``labkit.mm.scheduler``.
"""

from __future__ import annotations

from bisect import bisect_right

from labkit.errors import choice

__all__ = ["schedule_encoder_inputs", "SchedulingStrategy", "LoopStrategy", "CursorStrategy", "WindowStrategy",
           "SCHEDULING_STRATEGIES", "make_strategy"]


def schedule_encoder_inputs(request, num_computed_tokens: int, num_new_tokens: int, encoder_compute_budget: int, cache,
                            *, shift_computed_tokens: int = 0, disable_chunked_mm_input: bool = False,
                            start_index: int = 0) -> tuple[list[int], int, int]:
    """Choose the encoder inputs for tokens ``[num_computed_tokens, num_computed_tokens + num_new_tokens)``.

    Args:
        request: has ``mm_features`` (sorted by offset; ``identifier``, ``mm_position``),
            ``has_encoder_inputs``, ``request_id`` and ``get_num_encoder_embeds(i)``.
        num_computed_tokens: tokens of the request already in the KV cache.
        num_new_tokens: tokens the caller wants to schedule this step (already clamped to
            the token budget).
        encoder_compute_budget: embeddings the encoder may still compute this step.
        cache: an ``EncoderCacheManager`` (checked, and may evict; not allocated here).
        shift_computed_tokens: EAGLE look-ahead (1 with EAGLE, else 0).
        disable_chunked_mm_input: never schedule part of an item's placeholder.
        start_index: first item to visit; items before it must all end at or before
            ``num_computed_tokens`` (a strategy's skip; 0 visits all, as vLLM does).

    Returns:
        ``(encoder_inputs_to_schedule, num_new_tokens, encoder_compute_budget)``: item
        indices to encode (the caller allocates them in the cache once the step is
        committed), the possibly reduced token count, and the remaining budget.
    """
    if num_new_tokens == 0 or not request.has_encoder_inputs:
        return [], num_new_tokens, encoder_compute_budget
    encoder_inputs_to_schedule: list[int] = []
    mm_hashes_to_schedule: set[str] = set()
    num_embeds_to_schedule = 0
    mm_features = request.mm_features
    for i in range(start_index, len(mm_features)):
        mm_feature = mm_features[i]
        pos = mm_feature.mm_position
        start_pos = pos.offset
        num_encoder_tokens = pos.length
        num_encoder_embeds = pos.get_num_embeds()  # read first for every visited item, as vLLM does

        if start_pos >= num_computed_tokens + num_new_tokens + shift_computed_tokens:
            break  # this and later items are not needed yet
        if start_pos + num_encoder_tokens <= num_computed_tokens:
            continue  # already in the KV cache

        mm_hash = mm_feature.identifier
        if mm_hash in mm_hashes_to_schedule:
            continue  # same image earlier in this request, already scheduled this step
        if cache.check_and_update_cache(request, i):
            continue  # encoder output cached; the request now references it

        if (
            disable_chunked_mm_input
            and num_computed_tokens < start_pos
            and num_computed_tokens + num_new_tokens < start_pos + num_encoder_tokens
        ):
            # would split the item: schedule only the text before it
            num_new_tokens = max(0, start_pos - (num_computed_tokens + shift_computed_tokens))
            break

        if not cache.can_allocate(request, i, encoder_compute_budget, num_embeds_to_schedule):
            # out of encoder budget or cache: schedule only the text before this item
            if num_computed_tokens + shift_computed_tokens < start_pos:
                num_new_tokens = start_pos - (num_computed_tokens + shift_computed_tokens)
            else:
                num_new_tokens = 0
            break

        start_idx_rel = max(0, num_computed_tokens - start_pos)
        end_idx_rel = min(num_encoder_tokens, num_computed_tokens + num_new_tokens - start_pos)
        embeds_start, embeds_end = pos.get_embeds_indices_in_range(start_idx_rel, end_idx_rel)
        if embeds_end - embeds_start == 0:
            continue  # the scheduled slice of this item holds no embeddings

        num_embeds_to_schedule += num_encoder_embeds
        encoder_compute_budget -= num_encoder_embeds
        mm_hashes_to_schedule.add(mm_hash)
        encoder_inputs_to_schedule.append(i)
    return encoder_inputs_to_schedule, num_new_tokens, encoder_compute_budget


class SchedulingStrategy:
    """Base strategy (= ``loop``): where the item walk starts; ``forget`` drops a request's state."""

    name = "loop"

    def schedule(self, request, num_computed_tokens, num_new_tokens, encoder_compute_budget, cache,
                 shift_computed_tokens=0, disable_chunked_mm_input=False):
        return schedule_encoder_inputs(
            request, num_computed_tokens, num_new_tokens, encoder_compute_budget, cache,
            shift_computed_tokens=shift_computed_tokens, disable_chunked_mm_input=disable_chunked_mm_input,
        )

    def forget(self, request_id: str) -> None:
        """Drop state kept for ``request_id`` (no-op for stateless strategies)."""


class LoopStrategy(SchedulingStrategy):
    """vLLM 0.20.0: visit every item from the first."""

    name = "loop"


class CursorStrategy(SchedulingStrategy):
    """Per-request cursor past the leading items already in the KV cache (rewinds when tokens go back)."""

    name = "cursor"

    def __init__(self) -> None:
        self._state: dict[str, list] = {}

    def schedule(self, request, num_computed_tokens, num_new_tokens, encoder_compute_budget, cache,
                 shift_computed_tokens=0, disable_chunked_mm_input=False):
        if num_new_tokens == 0 or not request.has_encoder_inputs:
            return [], num_new_tokens, encoder_compute_budget
        state = self._state.get(request.request_id)
        if state is None:
            ends = [f.mm_position.offset + f.mm_position.length for f in request.mm_features]
            state = self._state[request.request_id] = [0, 0, ends]
        cursor, at, ends = state
        if num_computed_tokens != at:
            if num_computed_tokens < at:
                cursor = 0
            n = len(ends)
            while cursor < n and ends[cursor] <= num_computed_tokens:
                cursor += 1
            state[0] = cursor
            state[1] = num_computed_tokens
        if cursor == len(ends):
            return [], num_new_tokens, encoder_compute_budget  # every item is in the KV cache
        return schedule_encoder_inputs(
            request, num_computed_tokens, num_new_tokens, encoder_compute_budget, cache,
            shift_computed_tokens=shift_computed_tokens, disable_chunked_mm_input=disable_chunked_mm_input,
            start_index=cursor,
        )

    def forget(self, request_id: str) -> None:
        self._state.pop(request_id, None)


def _item_end(feature) -> int:
    pos = feature.mm_position
    return pos.offset + pos.length


class WindowStrategy(SchedulingStrategy):
    """Bisect to the first item ending after ``num_computed_tokens`` (vLLM 0.33 style); stateless."""

    name = "window"

    def schedule(self, request, num_computed_tokens, num_new_tokens, encoder_compute_budget, cache,
                 shift_computed_tokens=0, disable_chunked_mm_input=False):
        if num_new_tokens == 0 or not request.has_encoder_inputs:
            return [], num_new_tokens, encoder_compute_budget
        feats = request.mm_features
        first = bisect_right(feats, num_computed_tokens, key=_item_end)
        if first == len(feats):
            return [], num_new_tokens, encoder_compute_budget
        return schedule_encoder_inputs(
            request, num_computed_tokens, num_new_tokens, encoder_compute_budget, cache,
            shift_computed_tokens=shift_computed_tokens, disable_chunked_mm_input=disable_chunked_mm_input,
            start_index=first,
        )


#: name -> strategy class (instantiate one per scheduler: some keep per-request state)
SCHEDULING_STRATEGIES: dict[str, type[SchedulingStrategy]] = {
    "loop": LoopStrategy,
    "cursor": CursorStrategy,
    "window": WindowStrategy,
}


def make_strategy(name: str) -> SchedulingStrategy:
    """A fresh strategy instance registered as ``name``; ValueError names the choices."""
    return choice(SCHEDULING_STRATEGIES, name, "scheduling strategy", ValueError)()
