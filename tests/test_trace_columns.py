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


def test_group_codes_tell_strings_by_value_not_identity():
    a, b = "".join(["aten::", "mm"]), "".join(["aten:", ":mm"])  # equal strings, two objects
    assert a == b and a is not b
    code, keys = group_codes([a, None, b, "x", None], [1, 1, 1, 1, 2])
    assert code.tolist() == [0, 1, 0, 2, 3]
    assert keys == [("aten::mm", 1), (None, 1), ("x", 1), (None, 2)]
    # values other than strings keep pandas' rules: every NaN is one group
    code, keys = group_codes(np.array([float("nan"), "a", float("nan")], dtype=object))
    assert code.tolist() == [0, 1, 0] and keys[1] == ("a",)


def test_cat_mask_with_many_wanted_categories():
    names = [f"op{i}" for i in range(12)]
    values = names + [None, "op3", "other"]
    cat = pd.Series(pd.Categorical(values))
    wanted = names[:10]  # more than a handful: looked up per row
    assert cat_mask(cat, wanted).tolist() == [True] * 10 + [False, False, False, True, False]
    assert cat_mask(cat, wanted[:3]).tolist() == [True] * 3 + [False] * 12


def _thp_eligible(address: int) -> int | None:
    """The ``THPeligible`` field of the mapping holding ``address`` (None where smaps does not say)."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "THPeligible:":
                return int(line.split()[1])
    return None


def test_a_large_reservation_is_not_advised_for_huge_pages():
    import pathlib

    import pytest

    from labkit.trace.read.columns import ColumnStore
    mode = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode.exists() or "[madvise]" not in mode.read_text():
        pytest.skip("huge pages are not given on request here (transparent_hugepage is not at madvise)")
    advice = np._core.multiarray  # numpy's advice on (labkit's trace commands turn it off: keep_freed_memory)
    was = advice._set_madvise_hugepage(True)
    try:
        plain = np.empty(1 << 22)  # numpy asks for huge pages on an array this large
    finally:
        advice._set_madvise_hugepage(was)
    if _thp_eligible(plain.ctypes.data + (1 << 21)) != 1:
        pytest.skip("this kernel does not report huge-page eligibility per mapping")
    cols = ColumnStore()
    cols.reserve(1 << 22)
    cols.append([[1], [2], [3], [4], [5.0], [6.0], [7], [8], [9], [10], [11]])
    for a in cols.arrays:
        assert _thp_eligible(a.ctypes.data + (1 << 21)) == 0
    assert [c.tolist() for c in cols.columns()] == [[1], [2], [3], [4], [5.0], [6.0], [7], [8], [9], [10], [11]]


_REUSE = r"""
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from labkit.trace.read.columns import keep_freed_memory
    print(keep_freed_memory(), file=sys.stderr)
def faults(n=8, mib=20):  # first-write faults of n arrays of mib MiB, made and written, then all freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(mib << 17) for _ in range(n)]  # float64: mib MiB each
    got = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del arrays
    return got
first, second = faults(), faults()
print(first, second)
"""


def test_keep_freed_memory_reuses_what_the_last_arrays_freed():
    import platform
    import subprocess
    import sys

    import pytest

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("the allocator settings are glibc's")
    pages = 8 * (20 << 20) // 4096  # what writing the arrays touches, 4 KiB pages without huge-page advice
    env = {"NUMPY_MADVISE_HUGEPAGE": "0", "PATH": "/usr/bin:/bin"}  # both runs: one page per fault
    runs = {}
    for how in ("keep", "default"):
        p = subprocess.run([sys.executable, "-c", _REUSE, how], capture_output=True, text=True, env=env, check=True)
        runs[how] = [int(x) for x in p.stdout.split()]
        if how == "keep":
            assert p.stderr.strip() == "glibc heap reuse, no huge-page advice"
    assert all(first >= pages * 0.9 for first, _ in runs.values()), runs  # new memory, page by page, the first time
    assert runs["default"][1] >= pages * 0.9, runs  # glibc's default maps arrays this large anew each time
    assert runs["keep"][1] <= pages * 0.05, runs  # kept: the second arrays reuse the first ones' pages
