"""The Triton prefix-LM attention kernel against the float64 torch reference.

Without a GPU the kernel runs under the Triton interpreter (the kernel module switches it on
before defining its kernels), so shapes stay small. Error bounds, against the float64
reference: float32 inputs max |err| < 1e-4 (the interpreter computes float32 dots in numpy;
on a GPU the kernel uses IEEE float32 dots); float16 inputs max |err| < 1e-2 (outputs are
O(1), so this is also about 1e-2 relative; fp16 rounding of P and of the output is ~1e-3);
bfloat16 (GPU only) max |err| < 3e-2.
"""

import random

import pytest
import torch

from labkit.attn.prefix_attention import KernelConfig, pick_config, prefix_attention
from labkit.attn.prefix_mask import prefix_attention_ref
from labkit.device import has_cuda, kernel_mode

DEVICE = "cuda" if has_cuda() else "cpu"
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}

pytestmark = pytest.mark.skipif(kernel_mode() == "unavailable", reason="no GPU and no Triton interpreter")


def make_batch(rows, heads, kv_heads, dim, dtype, seed=0):
    """Packed inputs for rows given as ``(q_len, kv_len, [(start, end), ...])``."""
    g = torch.Generator().manual_seed(seed)
    tq = sum(r[0] for r in rows)
    tk = sum(r[1] for r in rows)
    q = torch.randn(tq, heads, dim, generator=g).to(DEVICE, dtype)
    k = torch.randn(tk, kv_heads, dim, generator=g).to(DEVICE, dtype)
    v = torch.randn(tk, kv_heads, dim, generator=g).to(DEVICE, dtype)
    cu_q, cu_k = [0], [0]
    for q_len, kv_len, _ in rows:
        cu_q.append(cu_q[-1] + q_len)
        cu_k.append(cu_k[-1] + kv_len)
    max_r = max(len(r[2]) for r in rows)
    ranges = None
    if max_r:
        ranges = torch.zeros(len(rows), max_r, 2, dtype=torch.int32)
        for i, r in enumerate(rows):
            for j, (s, e) in enumerate(r[2]):
                ranges[i, j, 0], ranges[i, j, 1] = s, e
        ranges = ranges.to(DEVICE)
    cu_q = torch.tensor(cu_q, dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor(cu_k, dtype=torch.int32, device=DEVICE)
    return q, k, v, cu_q, cu_k, ranges


def check(rows, *, heads=4, kv_heads=2, dim=32, dtype=torch.float32, window=0, seed=0, use_seq_lens=False,
          config=None):
    q, k, v, cu_q, cu_k, ranges = make_batch(rows, heads, kv_heads, dim, dtype, seed)
    seq_lens = [(r[0], r[1]) for r in rows] if use_seq_lens else None
    out = torch.full_like(q, float("nan"))  # poisoned: every element must be written
    got = prefix_attention(q, k, v, cu_q, cu_k, ranges, sliding_window=window, seq_lens=seq_lens, out=out,
                           config=config)
    assert got is out and got.dtype == dtype and got.shape == q.shape
    want = prefix_attention_ref(q.cpu(), k.cpu(), v.cpu(), cu_q.cpu(), cu_k.cpu(),
                                None if ranges is None else ranges.cpu(), sliding_window=window)
    assert torch.isfinite(got).all()
    err = (got.cpu().double() - want).abs().max().item()
    assert err < TOL[dtype], f"max abs err {err:.3g}"
    return err


def random_rows(rnd, n, max_len=40):
    """A batch mixing prefill, chunked-prefill and decode rows with assorted image ranges."""
    rows = []
    for i in range(n):
        kv = rnd.randint(2, max_len)
        kind = ["prefill", "chunked", "decode"][i % 3]
        q_len = kv if kind == "prefill" else 1 if kind == "decode" else rnd.randint(2, kv - 1) if kv > 2 else 1
        ranges = []
        style = rnd.choice(["none", "start", "end", "several", "single"])
        if style == "start":
            ranges = [(0, rnd.randint(1, kv - 1))]
        elif style == "end":
            ranges = [(rnd.randint(0, kv - 2), kv - 1)]
        elif style == "single":
            ranges = [(kv // 2, kv // 2), (0, 0)]
        elif style == "several":
            pos = 1
            while pos < kv - 2:
                end = min(pos + rnd.randint(1, 6), kv - 1)
                ranges.append((pos, end))
                pos = end + rnd.randint(2, 5)
        rows.append((q_len, kv, ranges))
    return rows


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("window", [0, 6])
def test_random_mixed_batches_fp32(group, window):
    rnd = random.Random(100 * group + window)
    rows = random_rows(rnd, 6)
    check(rows, heads=2 * group, kv_heads=2, dim=32, window=window, seed=group)


@pytest.mark.parametrize("window", [0, 9])
def test_random_mixed_batch_fp16_head_dim_64(window):
    rows = random_rows(random.Random(5 + window), 5, max_len=48)
    check(rows, heads=4, kv_heads=1, dim=64, dtype=torch.float16, window=window, seed=3)


def test_ranges_far_below_the_window_and_overlapping_it():
    # a long image range with a tiny window: image queries need keys far below the window, text ones not
    rows = [(70, 70, [(2, 50), (60, 61)]), (20, 70, [(40, 69)]), (1, 70, [(2, 50)])]
    check(rows, heads=2, kv_heads=1, window=4)


def test_ranges_at_sequence_start_and_end_and_single_tokens():
    rows = [(33, 33, [(0, 9), (20, 20), (25, 32)]), (1, 17, [(0, 16)]), (5, 17, [(12, 16)])]
    check(rows, heads=2, kv_heads=2, window=0)


def test_no_ranges_is_plain_causal_and_none_matches_padding_only():
    rows = [(30, 30, []), (4, 25, []), (1, 9, [])]
    q, k, v, cu_q, cu_k, _ = make_batch(rows, 4, 2, 32, torch.float32)
    plain = prefix_attention(q, k, v, cu_q, cu_k, None, sliding_window=5)
    padding = torch.tensor([[[0, 0], [3, 3]]] * 3, dtype=torch.int32, device=DEVICE)
    padded = prefix_attention(q, k, v, cu_q, cu_k, padding, sliding_window=5)
    assert torch.equal(plain, padded)
    want = prefix_attention_ref(q.cpu(), k.cpu(), v.cpu(), cu_q.cpu(), cu_k.cpu(), None, sliding_window=5)
    assert (plain.cpu().double() - want).abs().max() < 1e-4


def test_group_of_three_heads_pads_the_tile():
    rows = [(12, 12, [(2, 7)]), (1, 12, [(2, 7)])]
    check(rows, heads=6, kv_heads=2, dim=32)


def test_many_ranges_span_several_chunks():
    # 40 two-token ranges: more than one 32-wide chunk of the range reduction
    ranges = [(2 * i + 1, 2 * i + 2) for i in range(0, 80, 2)]
    rows = [(170, 170, ranges), (3, 170, ranges[:5])]
    check(rows, heads=2, kv_heads=2, dim=32, window=3)


def test_empty_rows_and_host_seq_lens():
    rows = [(0, 0, []), (9, 9, [(1, 4)]), (0, 5, []), (1, 6, [(0, 3)])]
    check(rows, heads=2, kv_heads=1, use_seq_lens=True)


def test_custom_scale_and_noncontiguous_inputs():
    rows = [(10, 10, [(3, 6)])]
    q, k, v, cu_q, cu_k, ranges = make_batch(rows, 2, 1, 32, torch.float32)
    q_nc = torch.cat([q, q], dim=-1)[..., :32]  # last dim strided: the wrapper makes it contiguous
    got = prefix_attention(q_nc, k, v, cu_q, cu_k, ranges, scale=0.3)
    want = prefix_attention_ref(q.cpu(), k.cpu(), v.cpu(), cu_q.cpu(), cu_k.cpu(), ranges.cpu(), scale=0.3)
    assert (got.cpu().double() - want).abs().max() < 1e-4


def test_empty_batch_launches_nothing():
    q = torch.zeros(0, 2, 32, device=DEVICE)
    k = torch.zeros(0, 2, 32, device=DEVICE)
    cu = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    assert prefix_attention(q, k, k, cu, cu, None).shape == (0, 2, 32)


def test_bad_arguments_fail_before_launch():
    rows = [(4, 6, [(1, 2)])]
    q, k, v, cu_q, cu_k, ranges = make_batch(rows, 4, 2, 32, torch.float32)
    with pytest.raises(ValueError, match="multiple"):
        prefix_attention(q[:, :3], k, v, cu_q, cu_k, ranges)
    with pytest.raises(ValueError, match="int32"):
        prefix_attention(q, k, v, cu_q.long(), cu_k, ranges)
    with pytest.raises(ValueError, match="add up"):
        prefix_attention(q, k, v, cu_q, cu_k, ranges, seq_lens=[(7, 3)])
    with pytest.raises(ValueError, match="does not fit"):
        prefix_attention(q, k, v, cu_q, cu_k, ranges, config=KernelConfig(8, 16))
    with pytest.raises(ValueError, match="out must match"):
        prefix_attention(q, k, v, cu_q, cu_k, ranges, out=torch.empty_like(q[:, :2]))


def test_pick_config_interpreter_and_gpu_defaults():
    assert pick_config(32, 4, 100, "interpret").block_m == 16
    assert pick_config(32, 32, 100, "interpret").block_m == 32
    decode = pick_config(256, 2, 1, "cuda")
    prefill = pick_config(256, 2, 8000, "cuda")
    assert decode.block_m == 16 and prefill.block_m >= 64


@pytest.mark.skipif(not has_cuda(), reason="bf16 arithmetic needs a GPU (the interpreter has none)")
def test_bf16_on_gpu_head_dim_256():
    rows = random_rows(random.Random(11), 6, max_len=300)
    check(rows, heads=8, kv_heads=4, dim=256, dtype=torch.bfloat16, window=64)


# -- the benchmark's spec and command line ---------------------------------------------------

def test_image_prompt_layout_hand_worked():
    from labkit.attn.bench_attn import image_prompt

    # lead 5 | <start> 6..13 <end> gap 3 | <start> 19..26 <end> gap 3 | tail 4
    assert image_prompt(2, 8, lead=5, gap=3, tail=4) == (35, ((6, 13), (19, 26)))
    length, ranges = image_prompt()
    assert length == 64 + 32 * (256 + 2 + 8) + 40 and len(ranges) == 32 and ranges[0] == (65, 320)


def test_case_flops_count_allowed_pairs_only():
    from labkit.attn.bench_attn import CASES
    from labkit.attn.prefix_mask import prefix_lm_mask

    case = CASES["tiny"]
    pairs = sum(int(prefix_lm_mask(a, b, r, case.sliding_window).sum()) for (a, b), r in zip(case.seq_lens, case.ranges))
    assert case.allowed_pairs() == pairs
    assert case.flops() == 4 * case.head_dim * case.num_heads * pairs


@pytest.mark.skipif(has_cuda(), reason="the CPU path of the command (interpreter check) is tested without a GPU")
def test_bench_command_on_cpu_records_an_interpreted_check(tmp_path, monkeypatch, capsys):
    import json

    from labkit.cli import main

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    out = tmp_path / "attn.json"
    assert main(["bench", "attn", "--device", "cpu", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["source"] == "interpreted" and data["name"] == "attn_bench_quick" and data["size"] == "quick"
    kernel = [r for r in data["rows"] if r["variant"] == "triton_prefix"][0]
    assert kernel["max_abs_err"] < 1e-4 and "median_ns" not in kernel
    assert list((tmp_path / "results").glob("*/attn_bench_quick.json"))  # quick by default, filed as such
    assert "speed needs a GPU" in capsys.readouterr().out


def test_bench_command_rejects_unknown_names(capsys):
    from labkit.cli import main

    assert main(["bench", "attn", "--cases", "nope", "--no-save"]) == 2
    assert "unknown case" in capsys.readouterr().err
    assert main(["bench", "attn", "--variants", "triton_prefix,nope", "--no-save"]) == 2
    assert "unknown variant" in capsys.readouterr().err
