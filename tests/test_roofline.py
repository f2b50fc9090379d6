"""The roofline: FLOPs and bytes counted by hand, the peak table's lookup, points, figure and widget.

Hand-worked cases give the FLOPs and bytes; the keys a row needs are checked against the
mask built straight from the rule (``prefix_lm_mask``) on random small shapes; points come
from planted rows whose achieved TFLOP/s and TB/s are worked out here.
"""

from __future__ import annotations

import random
import warnings

import pytest

from labkit.attn.bench_attn import CASES, AttnCase
from labkit.attn.prefix_mask import prefix_lm_mask
from labkit.results import ATTN_BENCH, find_all, make_result, save_result
from labkit.facts import load_peaks, peak_for
from labkit.viz.lab.roofline import (
    AttnTraffic,
    attention_traffic,
    case_traffic,
    needed_keys,
    plot_roofline,
    point,
    roofline_points,
)


def test_needed_keys_by_hand():
    assert needed_keys(1, 10) == 10  # a decode query sees every key
    assert needed_keys(10, 10, sliding_window=3) == 10  # each key is its own query's
    # a 4-query chunk at positions 6..9, window 3: causal keys 4..9
    assert needed_keys(4, 10, sliding_window=3) == 6
    assert needed_keys(4, 10, [(1, 5)], 3) == 6  # the image holds no query of the chunk
    assert needed_keys(4, 10, [(5, 7)], 3) == 6  # it does, but its keys are already in
    assert needed_keys(4, 10, [(0, 6)], 3) == 10  # query 6 sees the whole image 0..6
    assert needed_keys(4, 10, [(2, 2)], 3) == 6  # a one-token range allows nothing (s < e)
    assert needed_keys(4, 10, [(1, 2), (8, 12)], 3) == 6  # a range past the keys is cut at kv_len


def test_needed_keys_equal_the_masks_columns_on_random_shapes():
    rng = random.Random(7)
    for _ in range(300):
        kv = rng.randint(1, 40)
        q = rng.randint(1, kv)
        window = rng.choice([0, 0, 1, 3, 8])
        ranges = []
        for _ in range(rng.randint(0, 3)):
            s = rng.randint(0, kv + 2)
            ranges.append((s, s + rng.randint(0, 8)))
        mask = prefix_lm_mask(q, kv, ranges, window)
        assert needed_keys(q, kv, ranges, window) == int(mask.any(dim=0).sum()), (q, kv, ranges, window)


def test_traffic_of_small_cases_by_hand():
    # prefill of 4 tokens, 2 query heads over 1 KV head, head_dim 8, bf16:
    # pairs 1+2+3+4 = 10; FLOPs 4*8*2*10 = 640; Q and O 2*4*2*8*2 = 256 B; K and V 2*4*1*8*2 = 128 B
    t = attention_traffic([(4, 4)], [[]], num_heads=2, num_kv_heads=1, head_dim=8)
    assert (t.allowed_pairs, t.needed_keys, t.flops, t.bytes) == (10, 4, 640, 384)
    assert t.intensity == pytest.approx(640 / 384)
    # one decode row over 6 keys, 4 heads over 2, head_dim 16, fp16: 6 pairs, 4*16*4*6 = 1536 FLOPs;
    # Q and O 2*1*4*16*2 = 256 B, K and V 2*6*2*16*2 = 768 B
    t = attention_traffic([(1, 6)], [[]], num_heads=4, num_kv_heads=2, head_dim=16, element_bytes=2)
    assert (t.flops, t.bytes) == (1536, 1024) and t.intensity == 1.5
    # both rows in one launch, fp32: the sums (pairs 16, keys 10; bytes doubled per element)
    t = attention_traffic([(4, 4), (1, 6)], [[], []], num_heads=2, num_kv_heads=1, head_dim=8, element_bytes=4)
    assert (t.allowed_pairs, t.needed_keys) == (16, 10)
    assert t.flops == 4 * 8 * 2 * 16 and t.bytes == 2 * 5 * 2 * 8 * 4 + 2 * 10 * 1 * 8 * 4


def test_traffic_of_an_image_chunk_against_the_mask():
    # a 6-token chunk at positions 10..15 of 16 keys, window 4, one image 2..11 holding queries 10, 11
    mask = prefix_lm_mask(6, 16, [(2, 11)], 4)
    t = attention_traffic([(6, 16)], [[(2, 11)]], num_heads=1, num_kv_heads=1, head_dim=2, sliding_window=4)
    # causal keys 7..15 joined with the image 2..11: keys 2..15
    assert t.needed_keys == 14 == int(mask.any(dim=0).sum())
    assert t.allowed_pairs == int(mask.sum())
    assert t.bytes == 2 * 6 * 2 * 2 + 2 * 14 * 2 * 2


def test_benchmark_cases_flops_follow_the_benchmarks_rule():
    for name in ("prefill_local", "prefill_global", "decode", "mixed"):
        case = CASES[name]
        assert case_traffic(case).flops == case.flops()  # the rule attn_bench records
    # decode: every row reads all its keys; 8 heads x 256 x 2 B for Q and O, 4 KV heads for K and V
    decode = CASES["decode"]
    keys = sum(kv for _, kv in decode.seq_lens)
    assert case_traffic(decode).bytes == 2 * 128 * 8 * 256 * 2 + 2 * keys * 4 * 256 * 2


def test_peak_table_lookup_and_ridge():
    h200 = peak_for("NVIDIA H200")
    assert h200.name == "H200 SXM" and (h200.bf16_dense_tflops, h200.mem_tb_s) == (989.4, 4.8)
    assert h200.ridge_flop_per_byte == pytest.approx(989.4 / 4.8)
    assert h200.attainable_tflops(1.0) == pytest.approx(4.8) and h200.attainable_tflops(1000) == 989.4
    assert peak_for("NVIDIA H200 NVL").name == "H200 NVL"
    assert peak_for("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert peak_for("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert peak_for("NVIDIA A100-SXM4-80GB").mem_tb_s == 2.039
    assert peak_for("NVIDIA A100-SXM4-40GB").mem_tb_s == 1.555
    assert peak_for("NVIDIA GeForce RTX 4090").bf16_dense_tflops == 165.2
    assert peak_for("NVIDIA GB10") is None and peak_for(None) is None
    for p in load_peaks():
        assert "NVIDIA" in p.source and p.match and 0 < p.mem_tb_s < 10 and 100 < p.bf16_dense_tflops < 2000


def test_point_shares_by_hand():
    # 2e11 FLOPs and 1e9 bytes in 1 ms: 200 TFLOP/s, 1 TB/s, 200 FLOP/byte (left of the H200's ridge 206)
    row = {"case": "c", "variant": "triton_prefix", "median_ns": 1e6, "machine": "h200", "gpu_name": "NVIDIA H200"}
    p = point(row, AttnTraffic(flops=2 * 10**11, bytes=10**9, allowed_pairs=0, needed_keys=0), peak_for("NVIDIA H200"))
    assert p["tflops"] == pytest.approx(200) and p["tb_s"] == pytest.approx(1.0)
    assert p["bound"] == "memory" and p["roof_tflops"] == pytest.approx(200 * 4.8)
    assert p["pct_of_roof"] == pytest.approx(100 * 200 / 960)
    assert p["pct_of_peak_tflops"] == pytest.approx(100 * 200 / 989.4)
    assert p["pct_of_peak_tb_s"] == pytest.approx(100 / 4.8)


def _row(shape: AttnCase, variant="triton_prefix", median_ns=1e6, gpu="NVIDIA H200", **over):
    row = {"variant": variant, "case": shape.name, "total_q": shape.total_q,
           "total_kv": sum(kv for _, kv in shape.seq_lens), "num_heads": shape.num_heads,
           "num_kv_heads": shape.num_kv_heads, "head_dim": shape.head_dim, "sliding_window": shape.sliding_window,
           "flops": shape.flops(), "dtype": "bfloat16", "median_ns": median_ns, "machine": "m", "gpu_name": gpu}
    row.update(over)
    return row


def test_points_keep_matching_timed_rows_only():
    decode = CASES["decode"]
    rows = [
        _row(decode),
        _row(decode, variant="flex_attention", median_ns=2e6),
        _row(decode, variant="sdpa_mask"),  # not drawn
        _row(decode, variant="triton_prefix[m16n64w4s2]"),  # a sweep row: not drawn
        {k: v for k, v in _row(decode).items() if k != "median_ns"},  # untimed
        _row(decode, total_kv=123),  # recorded with other shapes
        _row(decode, gpu="NVIDIA GB10"),  # no peaks
        _row(decode, case="gone"),
    ]
    roof = roofline_points(rows)
    assert [(p["variant"], p["median_ms"]) for p in roof.points] == [("triton_prefix", 1.0), ("flex_attention", 2.0)]
    t = case_traffic(decode)
    assert roof.points[0]["tb_s"] == pytest.approx(t.bytes / 1e-3 / 1e12)
    assert len(roof.skipped) == 3
    assert "total_kv" in roof.skipped[0] and "GB10" in roof.skipped[1] and "not defined" in roof.skipped[2]
    assert list(roof.peaks) == ["NVIDIA H200"]


def test_recorded_results_prefer_the_full_run_per_machine(results_store):
    def record(machine, name, size, source="measured-gpu", created="2026-01-01"):
        r = make_result(name, [_row(CASES["decode"])], source=source, size=size,
                        machine={"slug": machine, "gpu_name": "NVIDIA H200"})
        r.created = created
        save_result(r, results_store)

    record("gpu-a", "attn_bench_quick", "quick")
    record("gpu-a", "attn_bench", "full")
    record("gpu-b", "attn_bench_quick", "quick")
    record("cpu-c", "attn_bench", "full", source="interpreted")
    # another result's file is never opened (the report lists every file a page reads):
    # a broken one would be read with a warning
    (results_store / "gpu-a" / "engine.json").write_text("{not json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = find_all(ATTN_BENCH, source="measured-gpu", root=results_store)
    assert [(r.slug, r.size) for r in found] == [("gpu-a", "full"), ("gpu-b", "quick")]


def test_figure_draws_the_roof_the_ridge_and_each_point():
    rows = [_row(CASES["decode"]), _row(CASES["prefill_global"], median_ns=1e6),
            _row(CASES["decode"], gpu="NVIDIA A100-SXM4-80GB", machine="a100")]
    roof = roofline_points(rows)
    fig = plot_roofline(roof)
    h200 = peak_for("NVIDIA H200")
    roof_line = next(t for t in fig.data if t.name == "roof: H200 SXM")
    ridge_at = list(roof_line.x).index(h200.ridge_flop_per_byte)
    assert roof_line.y[ridge_at] == pytest.approx(989.4)
    assert max(roof_line.y) == pytest.approx(989.4) and min(roof_line.y) < 989.4
    marks = [t for t in fig.data if t.mode == "markers+text" and t.visible is not False]
    xs = sorted(x for t in marks for x in t.x)
    expected = sorted(case_traffic(CASES[c]).intensity for c in ("decode", "prefill_global"))
    assert xs == pytest.approx(expected)
    # two GPUs: a dropdown, each button showing only its GPU's traces
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == ["NVIDIA H200", "NVIDIA A100-SXM4-80GB"]
    shown = menu.buttons[1].args[0]["visible"]
    assert [t.name for t, v in zip(fig.data, shown) if v][0] == "roof: A100 SXM 80GB"


def test_widget_shapes_reproduce_the_benchmark_cases():
    from labkit.widgets.roofline import make_case

    for kind in ("prefill_global", "prefill_local", "decode"):
        mine, bench = make_case(kind, 32, 128), CASES[kind]
        assert (mine.seq_lens, mine.ranges, mine.sliding_window) == (bench.seq_lens, bench.ranges, bench.sliding_window)
    small = make_case("decode", 2, 8)
    assert len(small.seq_lens) == 8 and small.name == "decode[2 img x 8]"
    with pytest.raises(ValueError, match="unknown case"):
        make_case("train", 2)


def test_widget_callback_places_a_new_measurement():
    from labkit.widgets.roofline import make_case, measured_roofline

    recorded = roofline_points([_row(CASES["decode"], median_ns=5e5)])

    def planted(case):  # 2 ms for the kernel, FlexAttention failed
        return [{"variant": "triton_prefix", "case": case.name, "median_ns": 2e6, "dtype": "bfloat16",
                 "machine": "m", "gpu_name": "NVIDIA H200"},
                {"variant": "flex_attention", "case": case.name, "error": "RuntimeError: planted"}]

    roof, new = measured_roofline("prefill_local", 4, 8, recorded=recorded, measure=planted)
    assert [p["case"] for p in roof.points] == ["decode", "prefill_local[4 img]"]
    live = roof.points[1]
    t = case_traffic(make_case("prefill_local", 4))
    assert live["tflops"] == pytest.approx(t.flops / 2e-3 / 1e12)
    assert live["flop_per_byte"] == pytest.approx(t.intensity)
    assert new[1]["error"] == "RuntimeError: planted"


def test_widget_without_a_gpu_says_why_and_cannot_measure():
    pytest.importorskip("ipywidgets")
    from labkit.widgets.roofline import make_roofline_widget

    box = make_roofline_widget("cpu", recorded=roofline_points([]))
    button, note = box.children[1], box.children[2]
    assert button.disabled and "needs a GPU" in note.value


@pytest.mark.gpu
def test_widget_measures_on_the_gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from labkit.widgets.roofline import measure_case, measured_roofline

    roof, rows = measured_roofline("decode", 2, 8, measure=lambda case: measure_case(case, ("triton_prefix",), repeats=5))
    assert rows[0]["max_abs_err"] < 0.05 and "error" not in rows[0]
    (p,) = roof.points
    # a shape this small may sit in L2 between repeats, so the HBM roof is no bound on it here
    assert p["tflops"] > 0 and p["bound"] == "memory"
