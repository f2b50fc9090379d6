"""EncoderCacheManager against vLLM's encoder-cache test cases (E.3), for every placeholder variant."""

from __future__ import annotations

import pytest
import torch

from labkit.mm.encoder_cache import EncoderCacheManager
from labkit.mm.placeholder import PLACEHOLDER_VARIANTS, get_placeholder_class
from labkit.mm.workload import MMFeature

pytestmark = pytest.mark.parametrize("variant", list(PLACEHOLDER_VARIANTS))


class MockRequest:
    """Like vLLM's test helper: one item per hash, each ``PlaceholderRange(offset=0, length=count)``."""

    def __init__(self, request_id, mm_hashes, token_counts, variant, masks=None):
        cls = get_placeholder_class(variant)
        masks = masks or [None] * len(mm_hashes)
        self.request_id = request_id
        self.mm_features = [MMFeature(h, cls(0, n, m)) for h, n, m in zip(mm_hashes, token_counts, masks)]
        self.has_encoder_inputs = bool(self.mm_features)

    def get_num_encoder_embeds(self, i):
        return self.mm_features[i].mm_position.get_num_embeds()


def test_basic_allocate_and_reuse(variant):
    cache = EncoderCacheManager(cache_size=10)
    req = MockRequest("r1", ["imgA"], [4], variant)
    assert not cache.check_and_update_cache(req, 0)
    assert cache.can_allocate(req, 0, int(1e9), 0)
    cache.allocate(req, 0)
    assert cache.check_and_update_cache(req, 0)
    assert "r1" in cache.cached["imgA"]
    assert cache.num_free_slots == 6
    cache.free_encoder_input(req, 0)
    cache.free_encoder_input(req, 0)  # twice is harmless
    assert not cache.cached["imgA"]
    assert "imgA" in cache.freeable
    assert cache.num_freeable_slots == 10
    assert cache.num_free_slots == 6


def test_freeing_decreases_refcount_and_moves_to_freeable(variant):
    cache = EncoderCacheManager(cache_size=10)
    req = MockRequest("req2", ["img3"], [5], variant)
    assert cache.can_allocate(req, 0, int(1e9), 0)
    cache.allocate(req, 0)
    assert len(cache.cached["img3"]) == 1
    cache.free_encoder_input(req, 0)
    assert not cache.cached["img3"]
    assert "img3" in cache.freeable
    assert cache.num_freeable_slots == 10


def test_free_request_frees_all_inputs(variant):
    cache = EncoderCacheManager(cache_size=10)
    req = MockRequest("req3", ["a", "b"], [2, 3], variant)
    for i in (0, 1):
        assert cache.can_allocate(req, i, int(1e9), 0)
        cache.allocate(req, i)
    cache.free(req)
    assert not cache.cached["a"] and not cache.cached["b"]
    assert list(cache.freeable) == ["a", "b"]
    assert cache.num_freeable_slots == 10


def test_eviction_when_cache_is_full(variant):
    cache = EncoderCacheManager(cache_size=10)
    req1 = MockRequest("req1", ["x"], [6], variant)
    req2 = MockRequest("req2", ["y"], [5], variant)
    assert cache.can_allocate(req1, 0, int(1e9), 0)
    cache.allocate(req1, 0)
    cache.free_encoder_input(req1, 0)
    assert cache.can_allocate(req2, 0, int(1e9), 0)  # evicts x
    cache.allocate(req2, 0)
    assert "x" not in cache.cached
    assert cache.get_freed_mm_hashes() == ["x"]
    assert cache.num_free_slots == 5


def test_get_cached_input_ids(variant):
    cache = EncoderCacheManager(cache_size=10)
    req = MockRequest("reqX", ["m", "n", "o"], [2, 4, 3], variant)
    for i in (0, 2):
        assert cache.can_allocate(req, i, int(1e9), 0)
        cache.allocate(req, i)
    assert cache.get_cached_input_ids(req) == {0, 2}


def test_has_cache_restores_from_freeable(variant):
    cache = EncoderCacheManager(cache_size=10)
    req = MockRequest("reqY", ["imgZ"], [4], variant)
    assert cache.can_allocate(req, 0, int(1e9), 0)
    cache.allocate(req, 0)
    cache.free_encoder_input(req, 0)
    assert cache.check_and_update_cache(req, 0)
    assert "imgZ" not in cache.freeable
    assert cache.num_freeable_slots == 6


def test_get_freed_mm_hashes_clears_freed_list(variant):
    cache = EncoderCacheManager(cache_size=10)
    req1 = MockRequest("reqA", ["a"], [5], variant)
    req2 = MockRequest("reqB", ["b"], [6], variant)
    assert cache.can_allocate(req1, 0, int(1e9), 0)
    cache.allocate(req1, 0)
    cache.free_encoder_input(req1, 0)
    assert cache.can_allocate(req2, 0, int(1e9), 0)
    cache.allocate(req2, 0)
    assert cache.get_freed_mm_hashes() == ["a"]
    assert cache.get_freed_mm_hashes() == []


def test_respects_space_limit(variant):
    cache = EncoderCacheManager(cache_size=10)
    req = MockRequest("reqO", ["a", "b"], [5, 6], variant)
    assert cache.can_allocate(req, 0, 100, 0)
    assert not cache.can_allocate(req, 1, 95, 5)  # 5 already chosen + 6 > 10


def test_respects_compute_limit(variant):
    cache = EncoderCacheManager(cache_size=100)
    req = MockRequest("reqO", ["a", "b"], [5, 6], variant)
    assert cache.can_allocate(req, 0, 10, 0)
    assert not cache.can_allocate(req, 1, 10 - 5, 5)  # budget left 5 < 6


def test_with_is_embed_mask(variant):
    cache = EncoderCacheManager(cache_size=100)
    mask = torch.zeros(100, dtype=torch.bool)
    mask[[5, 15, 25, 35, 45, 55, 65, 75]] = True
    req = MockRequest("r1", ["img1"], [100], variant, masks=[mask])
    cache.allocate(req, 0)
    assert cache.num_free_slots == 92
    assert req.mm_features[0].mm_position.get_num_embeds() == 8


def test_mask_based_retrieval(variant):
    mask = torch.tensor([False, False, True, True, False, True, True, True, False, False])
    pr = get_placeholder_class(variant)(0, 10, mask)
    assert pr.get_num_embeds() == 5
    s, e = pr.get_embeds_indices_in_range(2, 8)  # embeds before: 0, in range: 5
    assert (s, e - s) == (0, 5)
    s, e = pr.get_embeds_indices_in_range(0, 5)  # before 0, in range 2
    assert (s, e - s) == (0, 2)


def test_reset_clears_all_state(variant):
    cache = EncoderCacheManager(cache_size=20)
    req = MockRequest("r", ["a", "b"], [5, 6], variant)
    for i in (0, 1):
        cache.allocate(req, i)
    cache.free_encoder_input(req, 0)
    cache.reset()
    assert cache.cached == {} and len(cache.freeable) == 0 and cache.freed == []
    assert cache.num_free_slots == 20 and cache.num_freeable_slots == 20


def test_reset_allows_fresh_allocations(variant):
    cache = EncoderCacheManager(cache_size=10)
    req = MockRequest("r", ["a"], [10], variant)
    cache.allocate(req, 0)
    cache.reset()
    assert cache.can_allocate(req, 0, 100, 0)
    cache.allocate(req, 0)
    assert cache.num_free_slots == 0


def test_eviction_is_oldest_first_and_only_as_needed(variant):
    cache = EncoderCacheManager(cache_size=12)
    req = MockRequest("r", ["a", "b", "c", "d"], [4, 4, 4, 5], variant)
    for i in (0, 1, 2):
        cache.allocate(req, i)
    for i in (1, 0, 2):  # freeable order: b, a, c
        cache.free_encoder_input(req, i)
    assert cache.can_allocate(req, 3, 100, 0)  # needs 5: evict b (4) then a (4)
    assert cache.get_freed_mm_hashes() == ["b", "a"]
    assert list(cache.freeable) == ["c"] and cache.num_free_slots == 8


def test_referenced_entries_are_never_evicted(variant):
    cache = EncoderCacheManager(cache_size=10)
    req = MockRequest("r", ["a", "b"], [6, 5], variant)
    cache.allocate(req, 0)  # referenced, not freeable
    assert not cache.can_allocate(req, 1, 100, 0)
    assert cache.get_freed_mm_hashes() == []


def test_allocate_beyond_space_raises(variant):
    cache = EncoderCacheManager(cache_size=4)
    req = MockRequest("r", ["a"], [5], variant)
    with pytest.raises(RuntimeError):
        cache.allocate(req, 0)


def test_free_releases_in_set_order_nine_images(variant):
    # Hand-worked (vLLM 0.20.0): cache of 2 embeddings; a request with nine 1-token images
    # holds items 3 ("A") and 8 ("B"). free(request) walks the set {3, 8}, whose CPython
    # iteration order is 8, 3 (8 hashes to slot 0 of an 8-slot table, 3 to slot 3), so the
    # freeable queue is B, A and a new 1-embedding item evicts B. (Index order would evict A.)
    cache = EncoderCacheManager(cache_size=2)
    idents = [f"x{i}" for i in range(9)]
    idents[3], idents[8] = "A", "B"
    req = MockRequest("r", idents, [1] * 9, variant)
    for i in (3, 8):
        assert cache.can_allocate(req, i, int(1e9), 0)
        cache.allocate(req, i)
    cache.free(req)
    assert list(cache.freeable) == ["B", "A"]
    new = MockRequest("n", ["C"], [1], variant)
    assert cache.can_allocate(new, 0, int(1e9), 0)
    assert cache.get_freed_mm_hashes() == ["B"]
    assert "A" in cache.cached and "B" not in cache.cached


def test_free_order_small_requests_is_index_order(variant):
    # With fewer than eight items the set iterates in index order: freeable a, b, c.
    cache = EncoderCacheManager(cache_size=10)
    req = MockRequest("r", ["a", "b", "c"], [1, 1, 1], variant)
    for i in (2, 0, 1):  # allocation order does not matter, the set does
        cache.allocate(req, i)
    cache.free(req)
    assert list(cache.freeable) == ["a", "b", "c"]
