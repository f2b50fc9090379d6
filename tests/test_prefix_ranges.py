"""Prefix-range tensor: vLLM's exact output, and every strategy handing every layer the same tensor."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from labkit.attn.prefix_ranges import (
    PREFIX_RANGE_STRATEGIES,
    build_prefix_range_tensor,
    make_strategy,
    normalize_ranges,
    ranges_for_batch,
)
from labkit.mm.workload import make_request


# -- an independent reference, written straight from the description of vLLM's code --------

def reference(rows_by_index: dict[int, list[tuple[int, int]]], num_seqs: int):
    """numpy: (num_seqs, max_ranges, 2) int32 with (0,0) padding; None when every row is [(0,0)]."""
    lists = []
    for i in range(num_seqs):
        r = rows_by_index.get(i)
        lists.append([tuple(p) for p in r] if r else [(0, 0)])
    if all(r == [(0, 0)] for r in lists):
        return None
    width = max(len(r) for r in lists)
    out = np.zeros((num_seqs, width, 2), dtype=np.int32)
    for i, r in enumerate(lists):
        for j, (s, e) in enumerate(r):
            out[i, j, 0] = s
            out[i, j, 1] = e
    return torch.from_numpy(out)


def same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == torch.int32 and a.shape == b.shape and torch.equal(a.cpu(), b)


def random_batch(rng: random.Random):
    """(ranges as dict, ranges as list, num_seqs): empty batches, empty rows, single tokens, ragged."""
    num_seqs = rng.choice([0, 1, 1, 2, 3, 5, 8])
    as_list = []
    for _ in range(num_seqs):
        kind = rng.random()
        if kind < 0.25:
            as_list.append(rng.choice([None, []]))
            continue
        pos, row = rng.randint(0, 3), []
        for _ in range(rng.randint(1, 5)):
            length = rng.choice([1, 1, 2, 7, 256])
            row.append((pos, pos + length - 1))
            pos += length + rng.randint(0, 4)
        as_list.append(row)
    as_dict = {i: r for i, r in enumerate(as_list) if r is not None}
    return as_dict, as_list, num_seqs


# -- hand-worked cases ------------------------------------------------------------------------

def test_hand_worked_dict():
    t = build_prefix_range_tensor({1: [(3, 5), (7, 9)], 2: [(1, 1)]}, 4)
    assert t.dtype == torch.int32 and t.shape == (4, 2, 2)
    assert t.tolist() == [
        [[0, 0], [0, 0]],
        [[3, 5], [7, 9]],
        [[1, 1], [0, 0]],
        [[0, 0], [0, 0]],
    ]


def test_hand_worked_list_matches_dict():
    t = build_prefix_range_tensor([[], [(10, 265)], None], 3)
    assert t.tolist() == [[[0, 0]], [[10, 265]], [[0, 0]]]


def test_all_trivial_is_none():
    assert build_prefix_range_tensor({}, 4) is None
    assert build_prefix_range_tensor([[], None, []], 3) is None
    assert build_prefix_range_tensor({}, 0) is None
    assert build_prefix_range_tensor(None, 2) is None
    # vLLM compares each row with [(0, 0)]: a lone (0, 0) range counts as trivial ...
    assert build_prefix_range_tensor({0: [(0, 0)]}, 2) is None
    # ... but two of them do not
    assert build_prefix_range_tensor({0: [(0, 0), (0, 0)]}, 1).tolist() == [[[0, 0], [0, 0]]]


def test_padding_rows_get_trivial_range():
    # num_seqs larger than the requests (CUDA-graph padding rows)
    t = build_prefix_range_tensor({0: [(4, 4), (6, 8), (9, 9)]}, 3)
    assert t.tolist() == [[[4, 4], [6, 8], [9, 9]], [[0, 0]] * 3, [[0, 0]] * 3]


# Inputs vLLM's compute_mm_prefix_range_tensor takes, with what it gives (hand-worked from its
# algorithm: rows 0 .. num_seqs - 1 read with dict.get, a row is trivial iff == [(0, 0)],
# pad with (0, 0), torch.tensor(int32).view(num_seqs, max_ranges, 2)).
@pytest.mark.parametrize("ranges, num_seqs, expected", [
    ({0: [(-1, 3)]}, 1, [[[-1, 3]]]),          # negative start passes through
    ({0: [(5, 4)]}, 1, [[[5, 4]]]),            # end < start (an empty placeholder's range)
    ({0: [(7, 6)], 1: [(2, 3)]}, 2, [[[7, 6]], [[2, 3]]]),
    ({2: [(1, 2)]}, 2, None),                  # key beyond the batch: ignored
    ({-1: [(1, 2)]}, 2, None),                 # negative key: never read
    ({0: [(1, 2)], 5: [(9, 9)]}, 1, [[[1, 2]]]),
    ({0: [(1.0, 2)]}, 1, [[[1, 2]]]),          # torch converts the float
    ({0: [(1, 2)]}, -1, None),                 # range(-1) is empty: all rows trivial
    ({0: ((0, 0),)}, 1, [[[0, 0]]]),           # a tuple row is not == [(0, 0)]: not trivial
    ({0: [[0, 0]]}, 1, [[[0, 0]]]),            # nor is [[0, 0]]
    ([[(1, 2)], [(3, 4)]], 1, [[[1, 2]]]),     # the lab's list form: rows beyond num_seqs ignored
])
def test_accepts_what_vllm_accepts(ranges, num_seqs, expected):
    t = build_prefix_range_tensor(ranges, num_seqs)
    assert (None if t is None else t.tolist()) == expected


@pytest.mark.parametrize("ranges, num_seqs, exc", [
    ({0: [(1, 2, 3)]}, 1, RuntimeError),               # view(1, 1, 2) of 3 values
    ({0: [(1, 2)], 1: [(1, 2, 3)]}, 2, ValueError),    # ragged nested list
    ({0: [5]}, 1, RuntimeError),
    ({0: [(2**31, 0)]}, 1, RuntimeError),              # int32 overflow
    ({0: [(1, 2)]}, 1.0, TypeError),                   # range(1.0)
    ({0: [("a", 1)]}, 1, ValueError),
])
def test_raises_what_vllm_raises(ranges, num_seqs, exc):
    with pytest.raises(exc):
        build_prefix_range_tensor(ranges, num_seqs)


@pytest.mark.parametrize("bad, num_seqs", [
    ({0: [(1, 2, 3)]}, 1),        # not a pair
    ({0: [(1.0, 2)]}, 1),         # not ints
    ({0: [(1, 2)]}, -1),          # negative num_seqs
    ("abc", 3),                   # not a container of rows
])
def test_strategies_reject_bad_input_with_value_error(bad, num_seqs):
    for name in PREFIX_RANGE_STRATEGIES:
        with pytest.raises(ValueError):
            make_strategy(name).begin_step(bad, num_seqs)
    with pytest.raises(ValueError):
        normalize_ranges(bad, num_seqs)


@pytest.mark.parametrize("name", list(PREFIX_RANGE_STRATEGIES))
def test_strategies_take_vllm_edge_cases(name):
    # end < start and keys beyond the batch: as build_prefix_range_tensor (= vLLM)
    ranges = {0: [(5, 4), (8, 9)], 1: [(2, 2)], 3: [(1, 1)]}
    expected = build_prefix_range_tensor(ranges, 2)
    assert expected.tolist() == [[[5, 4], [8, 9]], [[2, 2], [0, 0]]]
    strategy = make_strategy(name)
    strategy.begin_step(ranges, 2)
    assert torch.equal(strategy.tensor_for_layer(0), expected)
    strategy.end_step()


def test_unknown_strategy():
    with pytest.raises(ValueError, match="per_step"):
        make_strategy("nope")


def test_normalize_gives_tuples():
    assert normalize_ranges({1: [[2, 3]]}, 2) == [[], [(2, 3)]]


# -- ranges from requests ---------------------------------------------------------------------

def test_ranges_for_batch_hand_worked():
    mask = torch.tensor([False, True, False, True, True])
    a = make_request("a", 40, [(2, 5), (20, 4)], is_embed=[mask, None])
    b = make_request("b", 10)  # no images
    assert ranges_for_batch([a, None, b]) == [[(3, 3), (5, 6), (20, 23)], [], []]


def test_ranges_for_batch_sliding_window_drop():
    # vLLM 0.20.0 (#40534): with a text sliding_window, a range longer than it is dropped
    mask = torch.tensor([True, True, True, False, True])  # runs (10, 12) and (14, 14)
    a = make_request("a", 40, [(10, 5), (20, 4)], is_embed=[mask, None])  # second: (20, 23)
    assert ranges_for_batch([a]) == [[(10, 12), (14, 14), (20, 23)]]
    assert ranges_for_batch([a], sliding_window=4) == [[(10, 12), (14, 14), (20, 23)]]  # 4 tokens: kept
    assert ranges_for_batch([a], sliding_window=3) == [[(10, 12), (14, 14)]]
    assert ranges_for_batch([a, None], sliding_window=1) == [[(14, 14)], []]


def test_ranges_for_batch_masked_all_false_image():
    a = make_request("a", 40, [(0, 3)], is_embed=[torch.zeros(3, dtype=torch.bool)])
    assert ranges_for_batch([a]) == [[]]


# -- strategies -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(PREFIX_RANGE_STRATEGIES))
@pytest.mark.parametrize("validate", [True, False])
def test_every_layer_gets_reference_tensor(name, validate):
    rng = random.Random(1234)
    strategy = make_strategy(name, "cpu", validate=validate)
    for step in range(40):
        as_dict, as_list, n = random_batch(rng)
        ranges = as_dict if step % 2 else as_list
        expected = reference(as_dict, n)
        assert same(build_prefix_range_tensor(ranges, n), expected)
        strategy.begin_step(ranges, n)
        for layer in range(3):
            got = strategy.tensor_for_layer(layer)
            assert same(got, expected), (name, step, layer)
        strategy.end_step()


def test_per_layer_nested_and_fallback_agree():
    rng = random.Random(7)
    nested = make_strategy("per_layer")
    plain = make_strategy("per_layer")
    plain.nested_ok = False
    for _ in range(15):
        as_dict, _, n = random_batch(rng)
        nested.begin_step(as_dict, n)
        plain.begin_step(as_dict, n)
        a, b = nested.tensor_for_layer(0), plain.tensor_for_layer(0)
        assert same(a, reference(as_dict, n)) and same(b, reference(as_dict, n))
    assert nested.nested_ok, "jagged nested tensors should work on this torch"


def test_per_layer_builds_a_new_tensor_each_layer():
    s = make_strategy("per_layer")
    s.begin_step({0: [(1, 4)]}, 1)
    assert s.tensor_for_layer(0) is not s.tensor_for_layer(1)
    s = make_strategy("per_step")
    s.begin_step({0: [(1, 4)]}, 1)
    assert s.tensor_for_layer(0) is s.tensor_for_layer(1)


# -- cached: re-upload exactly on change, never stale -----------------------------------------

def _step(s, ranges, n, layers=2):
    s.begin_step(ranges, n)
    ts = [s.tensor_for_layer(i) for i in range(layers)]
    s.end_step()
    return ts, s.ledger.rows()[-1]["uploads"]


@pytest.mark.parametrize("validate", [True, False])
def test_cached_uploads_exactly_on_change(validate):
    s = make_strategy("cached", validate=validate)
    rows = {0: [(2, 5), (9, 9)], 1: [(3, 7)], 2: []}
    ts, up = _step(s, rows, 3)
    assert up == 1 and same(ts[0], reference(rows, 3))
    first = ts[0]
    for _ in range(3):  # steady decode: same ranges, even rebuilt as new objects
        ts, up = _step(s, {k: [tuple(p) for p in v] for k, v in rows.items()}, 3)
        assert up == 0 and ts[0] is first
    snapshot_of_first = first.clone()

    # batch composition changes: two requests swap rows
    swapped = {0: rows[1], 1: rows[0], 2: []}
    ts, up = _step(s, swapped, 3)
    assert up == 1 and same(ts[0], reference(swapped, 3))
    assert torch.equal(first, snapshot_of_first), "an upload must never overwrite a tensor handed out"

    # a request finishes: fewer rows
    fewer = {0: rows[1], 1: rows[0]}
    ts, up = _step(s, fewer, 2)
    assert up == 1 and same(ts[0], reference(fewer, 2))

    # a request gains an image, appended in place to the very list object the cache saw
    fewer[1].append((20, 30))
    ts, up = _step(s, fewer, 2)
    assert up == 1 and same(ts[0], reference(fewer, 2))

    # padding rows added (num_seqs grows, ranges unchanged)
    ts, up = _step(s, fewer, 4)
    assert up == 1 and same(ts[0], reference(fewer, 4))

    # everything becomes trivial -> None, then back
    ts, up = _step(s, {}, 4)
    assert ts[0] is None
    ts, up = _step(s, fewer, 4)
    assert up == 1 and same(ts[0], reference(fewer, 4))


def test_cached_never_stale_randomized():
    rng = random.Random(99)
    s = make_strategy("cached")
    prev = None
    for _ in range(60):
        if prev is not None and rng.random() < 0.5:
            as_dict, n = prev  # repeat a batch
        else:
            as_dict, _, n = random_batch(rng)
        s.begin_step(as_dict, n)
        assert same(s.tensor_for_layer(0), reference(as_dict, n))
        s.end_step()
        prev = (as_dict, n)
    assert s.hits > 0 and s.misses > 0


def test_cached_invalidate_forces_upload():
    s = make_strategy("cached")
    _step(s, {0: [(1, 2)]}, 1)
    s.invalidate()
    _, up = _step(s, {0: [(1, 2)]}, 1)
    assert up == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(PREFIX_RANGE_STRATEGIES))
def test_every_layer_gets_reference_tensor_on_gpu(name):
    rng = random.Random(4321)
    strategy = make_strategy(name, "cuda")
    for _ in range(20):
        as_dict, as_list, n = random_batch(rng)
        expected = reference(as_dict, n)
        strategy.begin_step(as_list, n)
        for layer in range(2):
            got = strategy.tensor_for_layer(layer)
            assert got is None or (got.device.type == "cuda" and got.is_contiguous())
            assert same(got, expected)
        strategy.end_step()
    if name == "per_layer":
        assert strategy.nested_ok, "jagged nested path fell back to the direct pad on this GPU"


_FIRST_USE = """
from labkit.attn.prefix_ranges import make_strategy, warm_up
from whatif_pairs import HostCostClock
warm_up()
calls = []
for _ in range(2):
    s = make_strategy("per_layer", validate=False)
    clock = HostCostClock(call_ns=1.0)  # counts Python calls: deterministic
    with clock.active():
        s.begin_step({0: [(0, 3)], 1: [(1, 2), (5, 6)], 2: []}, 3)
        s.tensor_for_layer(0)
        s.end_step()
    calls.append(clock())
print(calls[0], calls[1])
"""


def test_warm_up_keeps_torch_first_use_imports_out_of_the_first_step():
    """In a fresh interpreter the first per_layer step would import torch's jagged nested tensor
    (here about 1.5 million Python calls against about 700 per step after it, calls a fixed-cost
    host model charges); after ``warm_up`` the first step makes exactly the calls of the second."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FIRST_USE], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parent)  # whatif_pairs (test scaffolding) lives beside it
    assert out.returncode == 0, out.stderr[-2000:]
    first, second = map(int, out.stdout.split()[-2:])
    assert first == second
