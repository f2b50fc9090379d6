"""Grouping and masking helpers of the trace tables (``labkit.trace.read.columns``), against hand-worked cases."""

from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.trace.read.columns import cat_mask, group_codes


def test_group_codes_number_groups_by_first_appearance():
    long = "void kernel<" + "x" * 400 + ">"  # kernel names are this long
    code, keys = group_codes([long, "b", long, "a", "b"], ["k", "k", "k", "k", "m"])
    assert code.tolist() == [0, 1, 0, 2, 3]
    assert keys == [(long, "k"), ("b", "k"), ("a", "k"), ("b", "m")]


def test_group_codes_sorted_like_pandas():
    steps = [3, 1, 3, 2, 1]
    code, keys = group_codes(steps, sort=True)
    assert keys == [(1,), (2,), (3,)] and code.tolist() == [2, 0, 2, 1, 0]
    # the same groups and sums as pandas' own grouping of those columns
    vals = [0.1, 0.2, 0.3, 0.4, 0.5]
    ours = pd.Series(vals).groupby(code, sort=True).sum().tolist()
    assert ours == pd.Series(vals).groupby(steps, sort=True).sum().tolist() == [0.2 + 0.5, 0.4, 0.1 + 0.3]


def test_group_codes_of_nothing():
    code, keys = group_codes([], [])
    assert len(code) == 0 and keys == []


def test_cat_mask_by_codes_equals_isin():
    values = ["kernel", "cpu_op", None, "gpu_memcpy", "kernel", "cuda_runtime"]
    cat = pd.Series(pd.Categorical(values))
    wanted = ("kernel", "gpu_memcpy", "not there")
    expected = [True, False, False, True, True, False]  # a missing value is in no set
    assert cat_mask(cat, wanted).tolist() == expected
    assert cat_mask(pd.Series(values, dtype=object), wanted).tolist() == expected  # not categorical: isin
    assert cat_mask(cat, []).tolist() == [False] * 6
    assert cat_mask(cat, {"cpu_op": 1}).tolist() == [False, True, False, False, False, False]  # a dict's keys
    assert isinstance(cat_mask(cat, wanted), np.ndarray)
