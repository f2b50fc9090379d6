"""The lab's placeholder variants against the installed vLLM's ``PlaceholderRange``.

The installed release has post-#40143 semantics: ``"list"`` and ``"fast"`` must match it
on everything; ``"tensor"`` (pre-#40143) must match wherever the facts' edge-case table
says the two agree, and differ exactly where it says they differ.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm.sh)")

import torch  # noqa: E402
from vllm.multimodal.inputs import PlaceholderRange  # noqa: E402
from vllm_helpers import random_mask  # noqa: E402

from labkit.mm.placeholder import PLACEHOLDER_VARIANTS  # noqa: E402

CASES = 400


def _outcome(fn, *args):
    """``("ok", value, types)`` or ``("raise", ExceptionType)`` for comparing behaviour."""
    try:
        value = fn(*args)
    except Exception as exc:  # noqa: BLE001 - the exception type is the behaviour compared
        return ("raise", type(exc))
    if isinstance(value, tuple):
        return ("ok", value, tuple(type(v) for v in value))
    if isinstance(value, list):
        return ("ok", value, [tuple(type(x) for x in v) if isinstance(v, tuple) else type(v) for v in value])
    return ("ok", value, type(value))


def _cases(seed: int):
    rng = random.Random(seed)
    for _ in range(CASES):
        length = rng.choice((0, 1, 2, 3, rng.randint(4, 40)))
        offset = rng.randint(0, 100)
        mask = random_mask(rng, length)
        if length == 0 and mask is None:
            mask = torch.zeros(0, dtype=torch.bool)
        yield offset, length, mask


def _index_pairs(length: int):
    pairs = [(s, e) for s in range(0, length + 1) for e in range(s, length + 1)]
    pairs += [(0, length + 1), (length, length + 2), (-1, length), (0, -1)]  # out of range, negative
    return pairs


@pytest.mark.parametrize("variant", ["list", "fast"])
def test_post_40143_variants_match_vllm(variant):
    cls = PLACEHOLDER_VARIANTS[variant]
    checked = 0
    for offset, length, mask in _cases(seed={"list": 1, "fast": 2}[variant]):
        ours = cls(offset, length, mask)
        theirs = PlaceholderRange(offset=offset, length=length, is_embed=mask)
        assert _outcome(ours.get_num_embeds) == _outcome(theirs.get_num_embeds), (offset, length, mask)
        assert ours.embeds_cumsum == theirs.embeds_cumsum
        assert _outcome(ours.extract_embeds_range) == _outcome(theirs.extract_embeds_range), (offset, mask)
        for s, e in _index_pairs(length):
            assert _outcome(ours.get_embeds_indices_in_range, s, e) == _outcome(
                theirs.get_embeds_indices_in_range, s, e
            ), (variant, offset, length, mask, s, e)
            checked += 1
    assert checked > 10 * CASES


def test_equality_rule_matches_vllm():
    rng = random.Random(7)
    for variant, cls in PLACEHOLDER_VARIANTS.items():
        for _ in range(100):
            length = rng.randint(1, 8)
            a_mask, b_mask = random_mask(rng, length), random_mask(rng, length)
            off_b = rng.choice((3, 4))
            a = (3, length, a_mask)
            b = (off_b, length, b_mask if rng.random() < 0.5 else a_mask)
            assert (cls(*a) == cls(*b)) == (PlaceholderRange(*a) == PlaceholderRange(*b)), (variant, a, b)


def test_tensor_variant_agrees_where_the_facts_say_so():
    cls = PLACEHOLDER_VARIANTS["tensor"]
    agree = 0
    for offset, length, mask in _cases(seed=11):
        ours = cls(offset, length, mask)
        theirs = PlaceholderRange(offset=offset, length=length, is_embed=mask)
        empty_mask = mask is not None and mask.numel() == 0
        if not empty_mask:
            assert ours.get_num_embeds() == theirs.get_num_embeds()
            assert type(ours.get_num_embeds()) is int
        if mask is not None:
            assert isinstance(ours.embeds_cumsum, torch.Tensor)
            assert ours.embeds_cumsum.tolist() == theirs.embeds_cumsum
        assert ours.extract_embeds_range() == theirs.extract_embeds_range()
        for s, e in _index_pairs(length):
            if mask is not None and e <= 0:
                continue  # B.3 (end_idx == 0) and negative end_idx: differ, checked below
            if empty_mask:
                continue
            assert _outcome(ours.get_embeds_indices_in_range, s, e) == _outcome(
                theirs.get_embeds_indices_in_range, s, e
            ), (offset, length, mask, s, e)
            agree += 1
    assert agree > 5 * CASES


def test_tensor_variant_differs_exactly_as_table_b3():
    tensor_cls = PLACEHOLDER_VARIANTS["tensor"]
    empty = torch.zeros(0, dtype=torch.bool)
    # empty mask: pre-#40143 raises IndexError, post gives 0 and (0, 0)
    with pytest.raises(IndexError):
        tensor_cls(0, 0, empty).get_num_embeds()
    with pytest.raises(IndexError):
        tensor_cls(0, 0, empty).get_embeds_indices_in_range(0, 0)
    assert PlaceholderRange(0, 0, empty).get_num_embeds() == 0
    assert PlaceholderRange(0, 0, empty).get_embeds_indices_in_range(0, 0) == (0, 0)
    # end_idx == 0 on a non-empty mask: pre wraps to the total, post gives 0
    mask = torch.tensor([False, True, False, True, True])
    assert tensor_cls(2, 5, mask).get_embeds_indices_in_range(0, 0) == (0, 3)
    assert PlaceholderRange(2, 5, mask).get_embeds_indices_in_range(0, 0) == (0, 0)
    # negative end_idx (beyond the table's "wrap-around" row): pre wraps, post's `end_idx > 0`
    # guard gives 0 -- start_idx still wraps on both sides
    assert tensor_cls(2, 5, mask).get_embeds_indices_in_range(0, -1) == (0, 2)
    assert PlaceholderRange(2, 5, mask).get_embeds_indices_in_range(0, -1) == (0, 0)
    assert tensor_cls(2, 5, mask).get_embeds_indices_in_range(-1, 5) == PlaceholderRange(2, 5, mask).get_embeds_indices_in_range(-1, 5) == (0, 3)
    # is_embed None: identical, no clamping
    assert tensor_cls(2, 5).get_embeds_indices_in_range(0, 0) == PlaceholderRange(2, 5).get_embeds_indices_in_range(0, 0) == (0, 0)
    # the facts' docstring example agrees on both sides
    assert tensor_cls(2, 5, mask).get_embeds_indices_in_range(3, 5) == PlaceholderRange(2, 5, mask).get_embeds_indices_in_range(3, 5) == (1, 3)
    # the differing cases are the only ones: on random non-empty masks with end_idx == 0
    rng = random.Random(3)
    for _ in range(200):
        length = rng.randint(1, 20)
        m = random_mask(rng, length)
        if m is None:
            continue
        total = int(m.sum())
        assert tensor_cls(0, length, m).get_embeds_indices_in_range(0, 0) == (0, total)
        assert PlaceholderRange(0, length, m).get_embeds_indices_in_range(0, 0) == (0, 0)
