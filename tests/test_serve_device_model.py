"""The Gemma-4-E4B step model: bytes and FLOPs worked out by hand, rooflines, efficiencies, bad input.

The expected counts are written out from the architecture's published shapes (42 layers,
hidden 2560, 8 query heads, 2 KV heads of 256 on sliding and 512 on global layers, window 512,
layers 24-41 KV-shared, MLP 10240, PLE 256, vocabulary 262144; vision 16 x 768 / 3072, 12 heads
of 64); times are checked with hand-set efficiencies (``uniform_efficiencies``), and the
recorded efficiencies against the roofline module's own reading of the same recordings.
"""

from __future__ import annotations

import inspect
import json
import random

import pytest

from labkit.errors import UsageError
from labkit.gpu.device_efficiency import (
    EFFICIENCY_NAMES,
    PROFILE_DECODE_ROWS,
    PROFILE_PREFILL_TOKENS,
    Efficiency,
    load_efficiencies,
    uniform_efficiencies,
)
from labkit.gpu.device_model import (
    ENCODER_PATCHES,
    GPUS,
    PR40143_REAL_PATCHES,
    PR40143_SOFT_TOKENS,
    PrefillChunk,
    decode_step_ms,
    describe,
    get_gpu,
    step_device_time,
)
from labkit.facts import GEMMA4_E4B as E4B
from labkit.facts import GLOBAL, SLIDING, Gemma4Arch, VisionTower
from labkit.step_model import StepShape

ONE = uniform_efficiencies(1.0, 1.0)

# one layer's matrices, by hand (elements)
SLIDING_OWNER = (2560 * 8 * 256 + 2560 * 2 * 256 * 2 + 8 * 256 * 2560   # q, k, v, o
                 + 3 * 2560 * 10240 + 2 * 2560 * 256)                    # gate/up/down, PLE gate + projection
GLOBAL_OWNER = (2560 * 8 * 512 + 2560 * 2 * 512 * 2 + 8 * 512 * 2560 + 3 * 2560 * 10240 + 2 * 2560 * 256)
SLIDING_SHARED = 2560 * 8 * 256 * 2 + 3 * 2560 * 10240 + 2 * 2560 * 256  # q and o only
GLOBAL_SHARED = 2560 * 8 * 512 * 2 + 3 * 2560 * 10240 + 2 * 2560 * 256
# layers 0-23: 20 sliding + 4 global own a cache; 24-41: 15 sliding + 3 global share
DECODER = 20 * SLIDING_OWNER + 4 * GLOBAL_OWNER + 15 * SLIDING_SHARED + 3 * GLOBAL_SHARED + 2560 * 42 * 256
LM_HEAD = 262144 * 2560
KV_SLIDING = 2 * 2 * 256 * 2  # K and V, 2 heads of 256, bf16: bytes per token per layer
KV_GLOBAL = 2 * 2 * 512 * 2
QO_SLIDING = 2 * 8 * 256 * 2  # Q read + O written per token per layer
QO_GLOBAL = 2 * 8 * 512 * 2
PAIR_SLIDING = 4 * 256 * 8  # FLOPs per (query, key) pair per layer
PAIR_GLOBAL = 4 * 512 * 8


def test_layer_pattern_kv_owners_and_params_by_hand():
    assert [i for i, t in enumerate(E4B.layer_types) if t == GLOBAL] == [5, 11, 17, 23, 29, 35, 41]
    assert [E4B.kv_owner(i) for i in (0, 23, 24, 28, 29, 40, 41)] == [0, 23, 22, 22, 23, 22, 23]
    assert E4B.layer_params(0) == SLIDING_OWNER and E4B.layer_params(5) == GLOBAL_OWNER
    assert E4B.layer_params(24) == SLIDING_SHARED and E4B.layer_params(41) == GLOBAL_SHARED
    assert E4B.decoder_params == DECODER == 3_972_792_320
    sliding, glob = E4B.attention_groups
    assert (sliding.reading_layers, sliding.owning_layers, glob.reading_layers, glob.owning_layers) == (35, 20, 7, 4)
    assert E4B.kv_write_bytes_per_token == 20 * KV_SLIDING + 4 * KV_GLOBAL


def test_one_decode_request_at_context_1000():
    # 999 cached tokens and the new one: 1000 keys
    t = step_device_time(E4B, "h200", StepShape((999,)), efficiencies=ONE)
    assert t.weight_bytes == 2 * (DECODER + LM_HEAD)
    assert t.kv_read_bytes == 35 * 512 * KV_SLIDING + 7 * 1000 * KV_GLOBAL  # sliding layers read the window
    assert t.part("decode_attn_sliding").bytes == 35 * 512 * KV_SLIDING + 35 * QO_SLIDING
    assert t.part("decode_attn_global").bytes == 7 * 1000 * KV_GLOBAL + 7 * QO_GLOBAL
    assert t.attention_flops == 35 * 512 * PAIR_SLIDING + 7 * 1000 * PAIR_GLOBAL
    assert t.gemm_flops == 2 * DECODER and t.lm_head_flops == 2 * LM_HEAD
    assert t.part("embedding").bytes == (2560 + 42 * 256) * 2
    assert t.part("kv_write").bytes == 20 * KV_SLIDING + 4 * KV_GLOBAL
    bw, fl = GPUS["h200"].mem_tb_s * 1e3, GPUS["h200"].bf16_dense_tflops * 1e3  # bytes/ns, FLOP/ns
    gemm = t.part("decoder_gemm")
    assert gemm.memory_ns == pytest.approx(2 * DECODER / bw) and gemm.compute_ns == pytest.approx(2 * DECODER / fl)
    assert gemm.bound == "memory" and gemm.time_ns == gemm.memory_ns
    assert t.part("prefill_attn_global").time_ns == 0 and t.vision_flops == 0
    assert t.total_ns == pytest.approx(sum(p.time_ns for p in t.parts))
    assert t.source == "simulated" and {p.source for p in t.parts} == {"simulated"}


def test_two_token_prefill_from_nothing():
    t = step_device_time(E4B, "h200", StepShape(prefill_chunks=(PrefillChunk(2, 0, samples=True),)), efficiencies=ONE)
    assert t.gemm_flops == 2 * DECODER * 2 and t.lm_head_flops == 2 * LM_HEAD * 1
    # queries at positions 1 and 2 see 1 and 2 keys (causal): 3 pairs, 2 keys, on every layer
    assert t.part("prefill_attn_sliding").flops == 35 * 3 * PAIR_SLIDING
    assert t.part("prefill_attn_global").flops == 7 * 3 * PAIR_GLOBAL
    assert t.kv_read_bytes == 35 * 2 * KV_SLIDING + 7 * 2 * KV_GLOBAL
    assert t.part("kv_write").bytes == 2 * (20 * KV_SLIDING + 4 * KV_GLOBAL)
    assert t.part("decode_attn_global").bytes == 0


def test_prefill_chunks_against_the_window():
    far = step_device_time(E4B, "h200", StepShape(prefill_chunks=((4, 1000),)), efficiencies=ONE)
    # 4 queries after 1000 cached tokens: 512 keys each on sliding layers, 1001..1004 on global ones
    assert far.part("prefill_attn_sliding").flops == 35 * 4 * 512 * PAIR_SLIDING
    assert far.part("prefill_attn_global").flops == 7 * (1001 + 1002 + 1003 + 1004) * PAIR_GLOBAL
    assert far.kv_read_bytes == 35 * (4 + 512 - 1) * KV_SLIDING + 7 * 1004 * KV_GLOBAL
    assert far.lm_head_flops == 0 and far.part("lm_head").bytes == 0  # a chunk mid-prompt samples nothing
    edge = step_device_time(E4B, "h200", StepShape(prefill_chunks=((4, 510),)), efficiencies=ONE)
    # positions 511..514: 511 keys, then the window of 512 three times; keys 0..513 all needed
    assert edge.part("prefill_attn_sliding").flops == 35 * (511 + 512 * 3) * PAIR_SLIDING
    assert edge.kv_read_bytes == 35 * 514 * KV_SLIDING + 7 * 514 * KV_GLOBAL


def test_prefill_window_pairs_match_the_mask_rule():
    from labkit.attn.prefix_mask import count_allowed_pairs
    from labkit.viz.lab.roofline import needed_keys

    arch = Gemma4Arch(**{**{f: getattr(E4B, f) for f in E4B.__dataclass_fields__}, "sliding_window": 7})
    rng = random.Random(3)
    for _ in range(40):
        before, tokens = rng.randint(0, 30), rng.randint(1, 20)
        t = step_device_time(arch, "h200", StepShape(prefill_chunks=((tokens, before),)), efficiencies=ONE)
        kv = before + tokens
        assert t.part("prefill_attn_sliding").flops == 35 * count_allowed_pairs(tokens, kv, [], 7) * PAIR_SLIDING
        assert t.part("prefill_attn_global").flops == 7 * count_allowed_pairs(tokens, kv, [], 0) * PAIR_GLOBAL
        assert t.kv_read_bytes == (35 * needed_keys(tokens, kv, (), 7) * KV_SLIDING
                                   + 7 * needed_keys(tokens, kv, (), 0) * KV_GLOBAL)


def test_one_image_through_the_vision_tower():
    layer = 4 * 768 * 768 + 3 * 768 * 3072  # q, k, v, o (12 x 64 = 768 wide) and the gated MLP
    patches, soft = 2520, 260
    t = step_device_time(E4B, "h200", StepShape(images_encoded=1), patches_per_image=patches,
                         soft_tokens_per_image=soft, efficiencies=ONE)
    assert t.part("vision_gemm").flops == (2 * (16 * layer + 3 * 16 * 16 * 768) * patches
                                           + 2 * 768 * 2560 * soft + patches * 768)  # + one add per pooled value
    assert t.part("vision_attn").flops == 16 * 4 * 64 * 12 * patches ** 2  # bidirectional over the image
    assert t.part("vision_gemm").bytes == 2 * (16 * layer + 3 * 16 * 16 * 768 + 768 * 2560)
    assert t.vision_flops == t.part("vision_gemm").flops + t.part("vision_attn").flops
    assert t.gemm_flops == 0 and t.weight_bytes == 0  # no text token this step
    two = step_device_time(E4B, "h200", StepShape(images_encoded=2), efficiencies=ONE)
    assert two.part("vision_attn").flops == 2 * 16 * 4 * 64 * 12 * ENCODER_PATCHES ** 2


def test_pr40143_image_sizes():
    # 1024 x 1536 keeps its 2:3 aspect at 48-px multiples within 280 x 9 patches: 39 x 60 patches -> 13 x 20 soft
    assert PR40143_SOFT_TOKENS == 13 * 20 and PR40143_REAL_PATCHES == 39 * 60
    assert ENCODER_PATCHES == 280 * 9  # the processor pads every image to the maximum


def test_roofline_switches_between_decode_and_a_long_prefill_chunk():
    decode = step_device_time(E4B, "h200", StepShape((0,)), efficiencies=ONE)
    prefill = step_device_time(E4B, "h200", StepShape(prefill_chunks=((8192, 0),)), efficiencies=ONE)
    # GEMM intensity is T FLOP/byte; the H200's ridge is 989.4 / 4.8 = 206 FLOP/byte
    assert decode.part("decoder_gemm").bound == "memory"
    assert prefill.part("decoder_gemm").bound == "compute"
    flop_per_ns = GPUS["h200"].bf16_dense_tflops * 1e3
    assert prefill.part("decoder_gemm").time_ns == pytest.approx(2 * DECODER * 8192 / flop_per_ns)
    assert prefill.part("prefill_attn_global").bound == "compute"
    batch = step_device_time(E4B, "h200", StepShape((8999,) * 64), efficiencies=ONE)
    assert batch.part("decode_attn_global").bound == "memory"


def test_more_context_more_time_and_the_h200_is_faster_at_decode():
    times = [decode_step_ms(E4B, "h200", 128, c) for c in (500, 2000, 9400, 17400)]
    assert times == sorted(times) and len(set(times)) == 4
    for c in (1000, 9400, 17400):
        assert decode_step_ms(E4B, "h200", 128, c) < decode_step_ms(E4B, "h100", 128, c)
    # the sliding layers stop growing past the window; the global ones do not
    a = step_device_time(E4B, "h200", StepShape((599,)))
    b = step_device_time(E4B, "h200", StepShape((4999,)))
    assert a.part("decode_attn_sliding").bytes == b.part("decode_attn_sliding").bytes
    assert a.part("decode_attn_global").bytes < b.part("decode_attn_global").bytes
    # a compute-bound GEMM runs at the same peak on both (same bf16 figure in the table)
    big = StepShape(prefill_chunks=((8192, 0),))
    assert (step_device_time(E4B, "h100", big).part("decoder_gemm").time_ns
            == pytest.approx(step_device_time(E4B, "h200", big).part("decoder_gemm").time_ns))


def test_decode_step_ms_is_the_step_of_a_uniform_batch():
    direct = step_device_time(E4B, "h100", StepShape((2999,) * 5), efficiencies=ONE)
    assert decode_step_ms(E4B, "h100", 5, 3000, efficiencies=ONE) == pytest.approx(direct.total_ns / 1e6)


def test_describe_rows_and_floor():
    t = step_device_time(E4B, "h200", StepShape((99, 199)), efficiencies=ONE, step_floor_ns=5000)
    rows = describe(t)
    assert [r["part"] for r in rows[:-1]] == [p.name for p in t.parts] and rows[-1]["part"] == "step_floor"
    assert sum(r["time_ns"] for r in rows) == pytest.approx(t.total_ns)
    assert t.total_ns == pytest.approx(sum(p.time_ns for p in t.parts) + 5000)
    assert {r["source"] for r in rows} == {"simulated"}
    assert all(r["assumed"] == (r["time_ns"] > 0) for r in rows)  # hand-set efficiencies, on the parts that work
    plain = step_device_time(E4B, "h200", StepShape((99,)), efficiencies=ONE)
    assert plain.floor_ns == 0 and "none measured" in plain.floor_origin


def test_recorded_efficiencies_match_the_roofline_reading():
    from labkit.results import ATTN_BENCH, find_all, results_rows
    from labkit.viz.lab.roofline import roofline_points

    eff = load_efficiencies("h200")
    roof = roofline_points(results_rows(find_all(ATTN_BENCH, source="measured-gpu")))
    points = {(p["case"], p["variant"]): p for p in roof.points if p["gpu"] == "H200 SXM"}
    assert eff["attn_decode_stream"].value == pytest.approx(points["decode", "triton_prefix"]["pct_of_peak_tb_s"] / 100)
    assert eff["attn_prefill_global_compute"].value == pytest.approx(
        points["prefill_global", "triton_prefix"]["pct_of_peak_tflops"] / 100)
    assert eff["attn_prefill_sliding_compute"].value == pytest.approx(
        points["prefill_local", "triton_prefix"]["pct_of_peak_tflops"] / 100)
    measured = {n for n in EFFICIENCY_NAMES if not eff[n].assumed}
    assert measured == {"gemm_stream", "gemm_compute", "lm_head_stream", "attn_decode_stream",
                        "attn_prefill_sliding_compute", "attn_prefill_global_compute"}
    assert eff["gather_stream"].value == eff["gemm_stream"].value and "assumed" in eff["gather_stream"].origin


def test_profile_efficiencies_by_hand():
    from labkit.engine.device.profiles import profiles_root

    prof = json.loads((profiles_root() / "h200.json").read_text(encoding="utf-8"))
    ops = prof["ops"]

    def dur(op, tokens):
        return ops[op]["base_ns"] + ops[op]["per_token_ns"] * tokens

    # the mini engine's gemma4-e4b-like stack: qkv 2560 x (8 + 2 x 2) x 256, o 2048 x 2560, gate_up 2560 x 20480, down
    mats = {"qkv_proj": 2560 * 3072, "o_proj": 2048 * 2560, "gate_up_proj": 2560 * 20480, "down_proj": 10240 * 2560}
    eff = load_efficiencies("h200")
    bw, fl = GPUS["h200"].mem_tb_s * 1e3, GPUS["h200"].bf16_dense_tflops * 1e3
    stream = 2 * sum(mats.values()) / sum(dur(op, 128) for op in mats) / bw
    compute = 2 * sum(mats.values()) * 4096 / sum(dur(op, 4096) for op in mats) / fl
    assert eff["gemm_stream"].value == pytest.approx(stream, rel=1e-4)  # durations are whole ns
    assert eff["gemm_compute"].value == pytest.approx(compute, rel=1e-4)
    assert eff["lm_head_stream"].value == pytest.approx(2 * 262144 * 2560 / dur("lm_head", 128) / bw, rel=1e-4)


def test_profile_shapes_are_the_recorded_ones():
    from labkit.engine.record_profile import default_shapes, record_profile

    rows = inspect.signature(record_profile).parameters["num_seqs"].default
    assert PROFILE_DECODE_ROWS == rows
    shapes = default_shapes(rows, 9280)
    assert int(shapes[0][0].sum()) == PROFILE_DECODE_ROWS and int(shapes[-1][0].sum()) == PROFILE_PREFILL_TOKENS


def test_the_h100_borrows_the_h200s_efficiencies():
    h100, h200 = load_efficiencies("h100"), load_efficiencies("h200")
    for n in EFFICIENCY_NAMES:
        assert h100[n].value == h200[n].value and h100[n].assumed
        assert "not measured on an H100" in h100[n].origin


def test_gpus_come_from_the_peak_table():
    from labkit.facts import load_peaks

    table = {p.name: p for p in load_peaks()}
    assert GPUS["h100"] is table["H100 SXM"] and GPUS["h200"] is table["H200 SXM"]
    assert get_gpu(GPUS["h100"])[0] == "h100"


def test_bad_input():
    with pytest.raises(UsageError):
        step_device_time(E4B, "h200", StepShape((99, -1)))
    with pytest.raises(UsageError):
        step_device_time(E4B, "h200", StepShape((-6,)))
    with pytest.raises(UsageError):
        step_device_time(E4B, "h200", StepShape(prefill_chunks=((-1, 0),)))
    with pytest.raises(UsageError):
        PrefillChunk(8, -3)
    with pytest.raises(UsageError):
        step_device_time(E4B, "h200", StepShape(images_encoded=-1))
    with pytest.raises(UsageError):
        step_device_time(E4B, "h200", StepShape(images_encoded=1), patches_per_image=0)
    with pytest.raises(UsageError, match="unknown GPU"):
        step_device_time(E4B, "a100", StepShape((9,)))
    with pytest.raises(UsageError):
        decode_step_ms(E4B, "h200", 0, 100)
    with pytest.raises(UsageError):
        step_device_time(E4B, "h200", StepShape(), step_floor_ns=-1)
    with pytest.raises(UsageError):
        Efficiency(1.5, "too good", True)
    with pytest.raises(UsageError):
        load_efficiencies("mi300")
    with pytest.raises(UsageError):
        Gemma4Arch(**{**{f: getattr(E4B, f) for f in E4B.__dataclass_fields__}, "layer_types": (SLIDING,) * 41})


def test_no_recordings_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no measured attn_bench"):
        load_efficiencies("h200", results_root=tmp_path)


def test_an_empty_step_costs_nothing():
    t = step_device_time(E4B, "h200", StepShape(), efficiencies=ONE)
    assert t.total_ns == 0 and all(p.bound == "none" for p in t.parts)
    assert isinstance(E4B.vision, VisionTower)
