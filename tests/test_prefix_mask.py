"""The prefix-LM mask: hand-worked matrices, pair counts, the FlexAttention mask_mod, the reference."""

import math
import random
import warnings

import pytest
import torch

from labkit.attn.prefix_mask import (check_varlen_args, count_allowed_pairs, make_prefix_lm_mask_mod,
                                     padded_prefix_lm_mask, prefix_attention_ref, prefix_lm_mask,
                                     query_range_bounds)


def _m(rows):
    return torch.tensor(rows, dtype=torch.bool)


# Expected matrices written out by hand from the rule (rows = queries, columns = keys).
HAND_CASES = [
    ("causal", 4, 4, [], 0, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]),
    ("one_range", 6, 6, [(1, 3)], 0, [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 1]]),
    ("range_overrides_window", 6, 6, [(1, 3)], 2, [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [0, 1, 1, 1, 0, 0],
        [0, 1, 1, 1, 0, 0],
        [0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 1, 1]]),
    ("chunked_prefill", 3, 6, [(2, 4)], 0, [
        [1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 1]]),
    ("two_ranges_start_and_end", 5, 5, [(0, 1), (3, 4)], 0, [
        [1, 1, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1]]),
    ("overlapping_ranges", 6, 6, [(1, 3), (2, 5)], 0, [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1]]),
    ("ignored_ranges", 4, 4, [(0, 0), (2, 2), (3, 1)], 0, [
        [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]),
    ("decode", 1, 6, [(1, 3)], 3, [[0, 0, 0, 1, 1, 1]]),
    ("window_only", 4, 4, [], 2, [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]),
]


@pytest.mark.parametrize("name,q_len,kv_len,ranges,window,expected", HAND_CASES, ids=[c[0] for c in HAND_CASES])
def test_prefix_lm_mask_hand_worked(name, q_len, kv_len, ranges, window, expected):
    got = prefix_lm_mask(q_len, kv_len, ranges, window)
    assert got.dtype == torch.bool and got.shape == (q_len, kv_len)
    assert torch.equal(got, _m(expected))
    assert count_allowed_pairs(q_len, kv_len, ranges, window) == sum(map(sum, expected))


def test_prefix_lm_mask_accepts_tensor_ranges_with_padding():
    rng = torch.tensor([[1, 3], [0, 0]], dtype=torch.int32)
    assert torch.equal(prefix_lm_mask(6, 6, rng), _m(HAND_CASES[1][5]))


def test_query_range_bounds_hand_worked():
    lo, hi = query_range_bounds(6, 6, [(1, 3), (2, 5)])
    assert lo.tolist() == [0, 1, 1, 1, 2, 2]
    assert hi.tolist() == [-1, 3, 5, 5, 5, 5]
    lo, hi = query_range_bounds(2, 6, [(3, 9)])  # queries 4, 5; end clipped to kv_len - 1
    assert lo.tolist() == [3, 3] and hi.tolist() == [5, 5]


def _random_ranges(rnd, kv_len):
    ranges, pos = [], rnd.randint(0, 3)
    while pos < kv_len - 1 and rnd.random() < 0.8:
        length = rnd.choice([1, 2, 3, 5, 8])
        ranges.append((pos, min(pos + length - 1, kv_len - 1)))
        pos += length + rnd.randint(0, 4)
    if rnd.random() < 0.3:
        ranges.append((0, 0))
    return ranges


def _brute_mask(q_len, kv_len, ranges, window):
    """The rule evaluated element by element in plain Python."""
    rows = []
    for j in range(q_len):
        q = kv_len - q_len + j
        row = []
        for k in range(kv_len):
            ok = k <= q and (window == 0 or q - k < window)
            ok = ok or any(s < e and s <= q <= e and s <= k <= e for s, e in ranges)
            row.append(ok)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.bool).reshape(q_len, kv_len)


def test_prefix_lm_mask_matches_elementwise_rule_on_random_cases():
    rnd = random.Random(3)
    for _ in range(60):
        kv_len = rnd.randint(1, 30)
        q_len = rnd.randint(0, kv_len)
        ranges = _random_ranges(rnd, kv_len)
        window = rnd.choice([0, 0, 1, 3, 7])
        expected = _brute_mask(q_len, kv_len, ranges, window)
        assert torch.equal(prefix_lm_mask(q_len, kv_len, ranges, window), expected)
        assert count_allowed_pairs(q_len, kv_len, ranges, window) == int(expected.sum())


def test_mask_rejects_bad_lengths():
    with pytest.raises(ValueError, match="exceed"):
        prefix_lm_mask(5, 4)
    with pytest.raises(ValueError, match="sliding_window"):
        prefix_lm_mask(2, 4, None, -1)


def _batch(rnd, n):
    lens, ranges = [], []
    for _ in range(n):
        kv = rnd.randint(1, 24)
        lens.append((rnd.choice([1, kv, rnd.randint(1, kv)]), kv))
        ranges.append(_random_ranges(rnd, kv))
    return lens, ranges


@pytest.mark.parametrize("window", [0, 4])
def test_flex_mask_mod_on_index_grids_matches_mask(window):
    rnd = random.Random(window)
    lens, ranges = _batch(rnd, 5)
    mask_mod = make_prefix_lm_mask_mod(lens, ranges, window)
    q_pad, kv_pad = max(a for a, _ in lens), max(b for _, b in lens)
    q_idx = torch.arange(q_pad)[:, None]
    kv_idx = torch.arange(kv_pad)[None, :]
    padded = padded_prefix_lm_mask(lens, ranges, window)
    for b, (q_len, kv_len) in enumerate(lens):
        got = mask_mod(torch.tensor(b), torch.tensor(0), q_idx, kv_idx)  # (q_pad, kv_pad)
        want = prefix_lm_mask(q_len, kv_len, ranges[b], window)
        assert torch.equal(got[:q_len, :kv_len], want)
        assert not got[:, kv_len:].any()  # padded keys are never seen
        assert torch.equal(padded[b, 0, :q_len, :kv_len], want)
        assert not padded[b, 0, :, kv_len:].any()
        assert padded[b, 0].any(dim=-1).all()  # no empty row, padded rows included


#: what a torch build raises for a FlexAttention feature it lacks on this device (an operator
#: without a kernel here): only this may skip the vmapped checks below, anything else is a failure
FLEX_UNSUPPORTED = (NotImplementedError,)

# rows of a padded batch: decode, chunked prefill, full prefill, ranges at both ends, overlapping
# ranges and padding, so every branch of the mask_mod and every padding rule is reached
FLEX_LENS = [(6, 6), (3, 6), (1, 7), (5, 9), (2, 4)]
FLEX_RANGES = [[(1, 3)], [(2, 4)], [(0, 5)], [(0, 1), (5, 8), (6, 7)], [(0, 0)]]


def _flex():
    return pytest.importorskip("torch.nn.attention.flex_attention")


def _flex_call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; a FlexAttention feature this build lacks on CPU skips, any other error fails."""
    try:
        return fn(*args, **kwargs)
    except FLEX_UNSUPPORTED as exc:
        pytest.skip(f"{fn.__name__} is not supported on this CPU build: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("window", [0, 3])
def test_flex_create_mask_on_cpu_matches_mask(window):
    """``create_mask`` evaluates the mask_mod under ``torch.vmap`` over batch, head, query and key
    (as FlexAttention does): every row equals the rule written out element by element."""
    fa = _flex()
    mask_mod = make_prefix_lm_mask_mod(FLEX_LENS, FLEX_RANGES, window)
    q_pad, kv_pad = max(a for a, _ in FLEX_LENS), max(b for _, b in FLEX_LENS)
    dense = _flex_call(fa.create_mask, mask_mod, len(FLEX_LENS), 2, q_pad, kv_pad, device="cpu")
    assert dense.shape == (len(FLEX_LENS), 2, q_pad, kv_pad) and dense.dtype == torch.bool
    for b, (q_len, kv_len) in enumerate(FLEX_LENS):
        want = _brute_mask(q_len, kv_len, FLEX_RANGES[b], window)
        for h in range(2):
            assert torch.equal(dense[b, h, :q_len, :kv_len], want), (b, h)
        assert not dense[b, :, :, kv_len:].any()  # padded keys are never seen
        assert torch.equal(dense[b, :, q_len:], dense[b, :, q_len - 1:q_len].expand(-1, q_pad - q_len, -1))
    if window == 0:  # the hand-worked matrices, as a second independent expectation
        assert torch.equal(dense[0, 0, :6, :6], _m(HAND_CASES[1][5]))
        assert torch.equal(dense[1, 0, :3, :6], _m(HAND_CASES[3][5]))
        assert dense[2, 0, 0, :7].all()


def test_flex_attention_on_cpu_matches_reference():
    """The block mask built from the mask_mod (vmapped, small blocks: empty, partial and full ones)
    drives eager FlexAttention on CPU; each row's output equals the float64 reference."""
    fa = _flex()
    lens, ranges, window, heads, kv_heads, dim = FLEX_LENS, FLEX_RANGES, 4, 4, 2, 16
    mask_mod = make_prefix_lm_mask_mod(lens, ranges, window)
    q_pad, kv_pad = max(a for a, _ in lens), max(b for _, b in lens)
    block_mask = _flex_call(fa.create_block_mask, mask_mod, len(lens), None, q_pad, kv_pad, device="cpu",
                            BLOCK_SIZE=2)
    q, k, v, cu_q, cu_k = _packed(lens, heads, kv_heads, dim, seed=5)
    qp = torch.zeros(len(lens), heads, q_pad, dim, dtype=q.dtype)
    kp = torch.zeros(len(lens), kv_heads, kv_pad, dim, dtype=q.dtype)
    vp = torch.zeros_like(kp)
    qs = ks = 0
    for b, (q_len, kv_len) in enumerate(lens):
        qp[b, :, :q_len] = q[qs:qs + q_len].transpose(0, 1)
        kp[b, :, :kv_len] = k[ks:ks + kv_len].transpose(0, 1)
        vp[b, :, :kv_len] = v[ks:ks + kv_len].transpose(0, 1)
        qs, ks = qs + q_len, ks + kv_len
    rng = torch.zeros(len(lens), max(len(r) for r in ranges), 2, dtype=torch.int32)
    for b, row in enumerate(ranges):
        rng[b, :len(row)] = torch.tensor(row, dtype=torch.int32)
    want = prefix_attention_ref(q, k, v, cu_q, cu_k, rng, sliding_window=window)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*without torch.compile.*")  # eager: the unfused path
        got = _flex_call(fa.flex_attention, qp, kp, vp, block_mask=block_mask, enable_gqa=True)
    qs = 0
    for b, (q_len, _) in enumerate(lens):
        assert torch.allclose(got[b, :, :q_len].transpose(0, 1), want[qs:qs + q_len], atol=1e-12), b
        qs += q_len


# -- the reference ---------------------------------------------------------------------------

def _packed(lens, heads, kv_heads, dim, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    tq, tk = sum(a for a, _ in lens), sum(b for _, b in lens)
    q = torch.randn(tq, heads, dim, generator=g, dtype=dtype)
    k = torch.randn(tk, kv_heads, dim, generator=g, dtype=dtype)
    v = torch.randn(tk, kv_heads, dim, generator=g, dtype=dtype)
    cu_q = torch.tensor([0] + [sum(a for a, _ in lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32)
    cu_k = torch.tensor([0] + [sum(b for _, b in lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32)
    return q, k, v, cu_q, cu_k


def test_reference_matches_per_query_softmax_written_out():
    lens = [(6, 6), (2, 5)]
    ranges = torch.tensor([[[1, 3]], [[0, 0]]], dtype=torch.int32)
    q, k, v, cu_q, cu_k = _packed(lens, 4, 2, 8)
    out = prefix_attention_ref(q, k, v, cu_q, cu_k, ranges, sliding_window=2, scale=0.5)
    masks = [_m(HAND_CASES[2][5]), prefix_lm_mask(2, 5, None, 2)]
    qs = ks = 0
    for (q_len, kv_len), mask in zip(lens, masks):
        for j in range(q_len):
            for h in range(4):
                keys = [t for t in range(kv_len) if mask[j, t]]
                logits = [0.5 * float(q[qs + j, h] @ k[ks + t, h // 2]) for t in keys]
                top = max(logits)
                w = [math.exp(x - top) for x in logits]
                want = sum(wi * v[ks + t, h // 2] for wi, t in zip(w, keys)) / sum(w)
                assert torch.allclose(out[qs + j, h], want, atol=1e-12)
        qs += q_len
        ks += kv_len


def test_reference_matches_sdpa_with_padded_mask():
    rnd = random.Random(7)
    lens, ranges = _batch(rnd, 4)
    tensor = torch.zeros(len(lens), max(len(r) for r in ranges) or 1, 2, dtype=torch.int32)
    for i, r in enumerate(ranges):
        for j, (s, e) in enumerate(r):
            tensor[i, j] = torch.tensor([s, e])
    q, k, v, cu_q, cu_k = _packed(lens, 4, 1, 16, seed=1)
    out = prefix_attention_ref(q, k, v, cu_q, cu_k, tensor, sliding_window=5)
    qs = ks = 0
    for b, (q_len, kv_len) in enumerate(lens):
        mask = prefix_lm_mask(q_len, kv_len, ranges[b], 5)
        qq = q[qs:qs + q_len].transpose(0, 1)
        kk = k[ks:ks + kv_len].transpose(0, 1).expand(4, -1, -1)
        vv = v[ks:ks + kv_len].transpose(0, 1).expand(4, -1, -1)
        want = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask).transpose(0, 1)
        assert torch.allclose(out[qs:qs + q_len], want, atol=1e-10)
        qs += q_len
        ks += kv_len


# -- argument checks -------------------------------------------------------------------------

def _good():
    q, k, v, cu_q, cu_k = _packed([(3, 5), (1, 4)], 4, 2, 16, dtype=torch.float32)
    return dict(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                prefix_ranges=torch.tensor([[[1, 2]], [[0, 0]]], dtype=torch.int32))


def _call(**over):
    a = _good()
    kw = {key: over.pop(key) for key in ("sliding_window", "scale", "seq_lens", "max_seqlen_q") if key in over}
    a.update(over)
    return check_varlen_args(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], a["prefix_ranges"], **kw)


BAD = [
    ("q_rank", lambda a: dict(q=a["q"][0]), "3-D"),
    ("dtype", lambda a: dict(q=a["q"].double(), k=a["k"].double(), v=a["v"].double()), "not supported"),
    ("mixed_dtypes", lambda a: dict(k=a["k"].half()), "dtypes differ"),
    ("kv_shapes", lambda a: dict(v=a["v"][:, :1]), "shapes differ"),
    ("head_dim", lambda a: dict(q=a["q"][..., :12], k=a["k"][..., :12], v=a["v"][..., :12]), "head_dim"),
    ("heads", lambda a: dict(q=torch.zeros(4, 3, 16)), "multiple"),
    ("cu_dtype", lambda a: dict(cu_seqlens_q=a["cu_seqlens_q"].long()), "int32"),
    ("cu_start", lambda a: dict(cu_seqlens_q=torch.tensor([1, 3, 4], dtype=torch.int32)), "start at 0"),
    ("cu_monotonic", lambda a: dict(cu_seqlens_k=torch.tensor([0, 6, 4, 9], dtype=torch.int32)), "lengths differ"),
    ("cu_decreasing", lambda a: dict(cu_seqlens_k=torch.tensor([0, 6, 5], dtype=torch.int32)), "non-decreasing"),
    ("cu_end", lambda a: dict(cu_seqlens_q=torch.tensor([0, 3, 3], dtype=torch.int32)), "end at"),
    ("q_longer", lambda a: dict(cu_seqlens_k=torch.tensor([0, 2, 9], dtype=torch.int32)), "exceeds kv_len"),
    ("ranges_dtype", lambda a: dict(prefix_ranges=a["prefix_ranges"].long()), "int32"),
    ("ranges_rank", lambda a: dict(prefix_ranges=a["prefix_ranges"][0]), "int32 of shape"),
    ("ranges_rows", lambda a: dict(prefix_ranges=a["prefix_ranges"][:1]), "rows"),
    ("ranges_type", lambda a: dict(prefix_ranges=[[1, 2]]), "torch.Tensor"),
    ("window", lambda a: dict(sliding_window=-1), "sliding_window"),
    ("scale", lambda a: dict(scale=0.0), "scale"),
    ("seq_lens_rows", lambda a: dict(seq_lens=[(3, 5)]), "rows"),
    ("seq_lens_sum", lambda a: dict(seq_lens=[(3, 5), (1, 5)]), "add up"),
    ("max_seqlen_q", lambda a: dict(max_seqlen_q=2), "max_seqlen_q"),
]


@pytest.mark.parametrize("name,change,message", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_raise_clear_errors(name, change, message):
    with pytest.raises(ValueError, match=message):
        _call(**change(_good()))


def test_good_arguments_give_host_facts():
    info = _call()
    assert info.seq_lens == ((3, 5), (1, 4))
    assert (info.num_heads, info.num_kv_heads, info.head_dim, info.group, info.num_ranges) == (4, 2, 16, 2, 1)
    assert _call(seq_lens=[(3, 5), (1, 4)]).max_seqlen_q == 3


# -- figures and the widget --------------------------------------------------------------------

def test_mask_categories_hand_worked():
    from labkit.viz.lab.mask import mask_categories

    want = [[1, 0, 0, 0, 0, 0],
            [1, 1, 2, 2, 0, 0],
            [0, 1, 1, 2, 0, 0],
            [0, 2, 1, 1, 0, 0],
            [0, 0, 0, 1, 1, 0],
            [0, 0, 0, 0, 1, 1]]
    assert mask_categories(6, 6, [(1, 3)], 2).tolist() == want


def test_mask_figures_hold_their_controls():
    pytest.importorskip("plotly")
    from labkit.viz.lab.mask import EXAMPLE_RANGE_SETS, plot_mask, plot_mask_examples, plot_mask_window_slider

    fig = plot_mask(3, 6, [(2, 4)])
    assert list(fig.data[0].y) == [3, 4, 5] and len(fig.data[0].z[0]) == 6
    slider = plot_mask_window_slider(8, 8, [(1, 4)], windows=(0, 2, 4))
    assert len(slider.data) == 3 and [t.visible for t in slider.data] == [True, False, False]
    steps = slider.layout.sliders[0].steps
    assert [s.args[0]["visible"] for s in steps] == [[True, False, False], [False, True, False], [False, False, True]]
    examples = plot_mask_examples()
    assert len(examples.data) == len(EXAMPLE_RANGE_SETS)
    assert [b.label for b in examples.layout.updatemenus[0].buttons] == list(EXAMPLE_RANGE_SETS)


def test_plot_attn_bench_skips_untimed_and_sweep_rows():
    pytest.importorskip("plotly")
    from labkit.viz.lab.mask import plot_attn_bench

    rows = [
        {"case": "a", "variant": "triton_prefix", "median_ns": 2e6, "tflops": 100.0},
        {"case": "a", "variant": "flex_attention", "median_ns": 4e6, "tflops": 50.0},
        {"case": "a", "variant": "triton_prefix[m16n64w4s2]", "median_ns": 3e6, "tflops": 70.0},
        {"case": "a", "variant": "sdpa_mask", "error": "boom"},
    ]
    fig = plot_attn_bench(rows)
    assert [t.name for t in fig.data] == ["triton_prefix", "flex_attention"]
    assert list(fig.data[0].y) == [100.0]
    ms_button = fig.layout.updatemenus[0].buttons[1]
    assert ms_button.args[0]["y"] == [[2.0], [4.0]]
    assert "no timed rows" in plot_attn_bench([]).layout.annotations[0].text
