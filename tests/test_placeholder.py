"""Placeholder-range variants against vLLM's test tables (E.1, E.2) and edge cases (B.3)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.mm.placeholder import PLACEHOLDER_VARIANTS, get_placeholder_class, masks_equal

T, F = True, False
ALL = list(PLACEHOLDER_VARIANTS)
LIST_SEMANTICS = ["list", "fast"]


def mask(*flags):
    return torch.tensor(flags, dtype=torch.bool)


def make(variant, flags=None, offset=0, length=None):
    cls = get_placeholder_class(variant)
    if flags is None:
        return cls(offset, 5 if length is None else length, None)
    return cls(offset, len(flags) if length is None else length, mask(*flags))


def test_registry_names_and_unknown():
    assert set(PLACEHOLDER_VARIANTS) == {"tensor", "list", "fast"}
    with pytest.raises(ValueError, match="unknown placeholder variant 'nope'"):
        get_placeholder_class("nope")


# --- E.1 test_placeholder_range_get_num_embeds ------------------------------------------
@pytest.mark.parametrize("variant", ALL)
@pytest.mark.parametrize("flags,expected", [
    (None, 5), ((T, T, T, T, T), 5), ((F, F, F, F, F), 0), ((T, F, T, F, T), 3), ((T,), 1),
])
def test_get_num_embeds(variant, flags, expected):
    n = make(variant, flags).get_num_embeds()
    assert n == expected and type(n) is int


# --- E.1 test_placeholder_range_embeds_cumsum ---------------------------------------------
@pytest.mark.parametrize("variant", ALL)
@pytest.mark.parametrize("flags,expected", [(None, None), ((F, T, F, T, T), [0, 1, 1, 2, 3]), ((T, T, T), [1, 2, 3])])
def test_embeds_cumsum(variant, flags, expected):
    pr = make(variant, flags)
    cs = pr.embeds_cumsum
    if expected is None:
        assert cs is None
        return
    if variant == "tensor":  # pre-#40143: a tensor (vLLM's old test compared with torch.equal)
        assert isinstance(cs, torch.Tensor) and torch.equal(cs, torch.tensor(expected))
    else:  # post-#40143: a Python list
        assert isinstance(cs, list) and cs == expected
    assert pr.embeds_cumsum is pr.embeds_cumsum  # cached


# --- E.2 get_embeds_indices_in_range / extract_embeds_range -------------------------------
@pytest.mark.parametrize("variant", ALL)
@pytest.mark.parametrize("flags,start,end,expected", [
    (None, 2, 4, (2, 4)),
    ((F, T, F, T, T), 3, 5, (1, 3)),
    ((F, T, F, T, T), 0, 2, (0, 1)),
    ((T, F, T, F), 2, 2, (1, 1)),
])
def test_get_embeds_indices_in_range(variant, flags, start, end, expected):
    got = make(variant, flags).get_embeds_indices_in_range(start, end)
    assert tuple(got) == expected
    assert all(type(x) is int for x in got)


def test_docstring_example_offset_two():
    # PlaceholderRange(offset=2, length=5, is_embed=[F,T,F,T,T]), (3, 5) -> (1, 3)
    for variant in ALL:
        assert make(variant, (F, T, F, T, T), offset=2).get_embeds_indices_in_range(3, 5) == (1, 3)


@pytest.mark.parametrize("variant", ALL)
@pytest.mark.parametrize("offset,flags,length,expected", [
    (0, None, 5, [(0, 4)]),
    (2, (F, T, F, T, T), None, [(3, 3), (5, 6)]),
    (0, (T, T, T, T), None, [(0, 3)]),
    (0, (F, F, F, F), None, []),
])
def test_extract_embeds_range(variant, offset, flags, length, expected):
    got = make(variant, flags, offset=offset, length=length).extract_embeds_range()
    assert got == expected and isinstance(got, list)


def test_fast_extract_returns_a_fresh_list():
    pr = make("fast", (F, T, T, F), offset=10)
    first = pr.extract_embeds_range()
    first.append((0, 0))
    assert pr.extract_embeds_range() == [(11, 12)]


# --- B.3 edge cases ------------------------------------------------------------------------
def test_empty_mask_before_raises():
    pr = get_placeholder_class("tensor")(0, 0, torch.zeros(0, dtype=torch.bool))
    with pytest.raises(IndexError):
        pr.get_num_embeds()
    with pytest.raises(IndexError):
        pr.get_embeds_indices_in_range(0, 0)


@pytest.mark.parametrize("variant", LIST_SEMANTICS)
def test_empty_mask_after_is_zero(variant):
    pr = get_placeholder_class(variant)(0, 0, torch.zeros(0, dtype=torch.bool))
    assert pr.get_num_embeds() == 0
    assert pr.get_embeds_indices_in_range(0, 0) == (0, 0)
    assert pr.embeds_cumsum == []
    assert pr.extract_embeds_range() == []


def test_end_idx_zero_wraps_before():
    # cumsum[-1] is the total: (0, N)
    assert make("tensor", (F, T, F, T, T)).get_embeds_indices_in_range(0, 0) == (0, 3)


@pytest.mark.parametrize("variant", LIST_SEMANTICS)
def test_end_idx_zero_is_zero_after(variant):
    assert make(variant, (F, T, F, T, T)).get_embeds_indices_in_range(0, 0) == (0, 0)


@pytest.mark.parametrize("variant", ALL)
def test_end_idx_past_length_raises(variant):
    with pytest.raises(IndexError):
        make(variant, (F, T, F, T, T)).get_embeds_indices_in_range(0, 6)
    with pytest.raises(IndexError):
        make(variant, (F, T, F, T, T)).get_embeds_indices_in_range(6, 6)


@pytest.mark.parametrize("variant", ALL)
def test_none_mask_passes_indices_through_unclamped(variant):
    assert make(variant, None).get_embeds_indices_in_range(3, 99) == (3, 99)
    assert make(variant, None).get_embeds_indices_in_range(0, 0) == (0, 0)


def test_negative_indices():
    # tensor: end_idx - 1 indexes from the back (cumsum [0,1,1,2,3]: end -1 -> cumsum[-2] = 2)
    assert make("tensor", (F, T, F, T, T)).get_embeds_indices_in_range(-1, -1) == (0, 2)
    # list semantics: the "> 0" guards map any non-positive index to 0
    for variant in LIST_SEMANTICS:
        assert make(variant, (F, T, F, T, T)).get_embeds_indices_in_range(-1, -1) == (0, 0)


@pytest.mark.parametrize("variant", ALL)
def test_all_false_mask(variant):
    pr = make(variant, (F, F, F))
    assert pr.get_num_embeds() == 0
    assert pr.get_embeds_indices_in_range(0, 3) == (0, 0)


# --- equality and immutability ------------------------------------------------------------
@pytest.mark.parametrize("variant", ALL)
def test_eq(variant):
    a = make(variant, (F, T, T))
    assert a == make(variant, (F, T, T))  # equal masks, distinct tensors
    assert a != make(variant, (T, T, T))
    assert a != make(variant, (F, T, T), offset=1)
    assert make(variant, None, length=3) == make(variant, None, length=3)
    assert make(variant, None, length=3) != make(variant, (T, T, T))  # None is not an all-True mask
    other = [v for v in ALL if v != variant][0]
    assert a != make(other, (F, T, T))  # different class
    hash(a)  # usable as a dict key like vLLM's frozen dataclass


def test_masks_equal_shapes():
    assert masks_equal(None, None)
    assert not masks_equal(None, mask(T))
    assert not masks_equal(mask(T), mask(T, T))


@pytest.mark.parametrize("variant", ["tensor", "list"])
def test_dataclass_variants_are_frozen(variant):
    pr = make(variant, (T,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        pr.offset = 3


# --- property tests against closed forms ---------------------------------------------------
def runs_reference(offset, flags):
    out, start = [], None
    for i, f in enumerate(list(flags) + [False]):
        if f and start is None:
            start = i
        if not f and start is not None:
            out.append((offset + start, offset + i - 1))
            start = None
    return out


@settings(max_examples=150, deadline=None)
@given(flags=st.lists(st.booleans(), min_size=1, max_size=40), offset=st.integers(0, 1000), data=st.data())
def test_matches_closed_forms(flags, offset, data):
    n = len(flags)
    start = data.draw(st.integers(0, n))
    end = data.draw(st.integers(start, n))
    expected = (sum(flags[:start]), sum(flags[:end]))
    for variant in ALL:
        pr = make(variant, tuple(flags), offset=offset)
        assert pr.get_num_embeds() == sum(flags)
        assert pr.extract_embeds_range() == runs_reference(offset, flags)
        got = pr.get_embeds_indices_in_range(start, end)
        if variant == "tensor" and end == 0:
            assert got == (0, sum(flags))  # the pre-#40143 wrap-around
        else:
            assert got == expected
