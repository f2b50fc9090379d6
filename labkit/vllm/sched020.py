"""vLLM 0.20's encoder-input scheduling loop, for vLLM >= 0.21's ``Scheduler``.

More: docs/reference.md, ``labkit.vllm.sched020``.
"""

from __future__ import annotations

__all__ = ["try_schedule_encoder_inputs_v020"]


def _try_schedule_encoder_inputs(self, request, num_computed_tokens: int, num_new_tokens: int,
                                 encoder_compute_budget: int, shift_computed_tokens: int = 0):
    """vLLM 0.20's ``_try_schedule_encoder_inputs`` as a method of vLLM >= 0.21's ``Scheduler`` (same returns)."""
    if num_new_tokens == 0 or not request.has_encoder_inputs:
        return [], num_new_tokens, encoder_compute_budget, [], []
    feats = request.mm_features
    cache = self.encoder_cache_manager
    enc_dec = self.is_encoder_decoder
    no_chunk = self.scheduler_config.disable_chunked_mm_input
    shifted_end = num_computed_tokens + num_new_tokens + shift_computed_tokens
    to_encode: list[int] = []
    external: list[int] = []
    duplicates: list[int] = []
    chosen: dict[str, int] = {}  # identifier -> embeddings, items chosen in this call
    pending_embeds = 0  # embeddings chosen in this call, not yet allocated in the cache

    for i, feat in enumerate(feats):
        pos = feat.mm_position
        start, length = pos.offset, pos.length
        embeds = pos.get_num_embeds()  # 0.20 reads it first, for every item it visits
        ident = feat.identifier

        if start >= shifted_end:
            break  # this item and all later ones lie beyond the step
        if enc_dec and num_computed_tokens > 0:
            assert start == 0, "encoder-decoder inputs start at position 0"
            continue  # encoder ran before the first decoder token
        if start + length <= num_computed_tokens:
            continue  # the item's tokens are already in the KV cache

        if not enc_dec:
            if ident in chosen:
                # same identifier as an item chosen earlier in this call; 0.33's cache keeps one
                # embedding count per identifier, so check it as 0.33 does, and hand the index to
                # the caller (it registers the occurrence)
                if self._reject_on_encoder_cache_embed_mismatch(request, i, ident, chosen[ident], embeds):
                    return [], 0, encoder_compute_budget, [], []
                duplicates.append(i)
                continue
            cached_embeds = cache.get_cached_num_encoder_embeds(request, i)
            if cached_embeds is not None and self._reject_on_encoder_cache_embed_mismatch(
                    request, i, ident, cached_embeds, embeds):
                return [], 0, encoder_compute_budget, [], []
            if cache.check_and_update_cache(request, i):
                continue  # encoder output cached: the request now references it

        if no_chunk and num_computed_tokens < start and num_computed_tokens + num_new_tokens < start + length:
            # the step would cover only part of the item: stop before it (EAGLE shift included)
            num_new_tokens = max(0, start - (num_computed_tokens + shift_computed_tokens))
            break

        if not cache.can_allocate(request, i, encoder_compute_budget, pending_embeds):
            # out of encoder budget or cache space: only the text before the item, if any
            if num_computed_tokens + shift_computed_tokens < start:
                num_new_tokens = start - (num_computed_tokens + shift_computed_tokens)
            else:
                num_new_tokens = 0
            break

        rel_start = max(0, num_computed_tokens - start)
        rel_end = min(length, num_computed_tokens + num_new_tokens - start)
        lo, hi = pos.get_embeds_indices_in_range(rel_start, rel_end)
        if hi - lo == 0:
            continue  # the scheduled part of the placeholder holds no embeddings

        chosen[ident] = embeds
        pending_embeds += embeds
        if self.ec_connector is not None and self.ec_connector.has_cache_item(ident):
            external.append(i)  # loaded from the remote encoder cache: no compute budget
            continue
        encoder_compute_budget -= embeds
        to_encode.append(i)

    return to_encode, num_new_tokens, encoder_compute_budget, external, duplicates


#: the method under the name vLLM gives it (what a profiler trace of the baseline shows)
try_schedule_encoder_inputs_v020 = _try_schedule_encoder_inputs
