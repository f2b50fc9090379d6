"""vLLM's own processor benchmark beside the lab's: the stage mapping, the figures, ratios and verdicts.

Hand-made benchmark outputs and rows with hand-worked figures; no vLLM.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from labkit.errors import UsageError
from labkit.vllm.processor.input_processing import VLLM_STAGES
from labkit.vllm.processor.mmproc_compare import (NO_PEER, STAGE_MAP, compare, lab_figures, model_verdict, pool_rounds,
                                        stage_status, vllm_figures)

SHARED = ("get_mm_hashes", "get_cache_missing_items", "apply_hf_processor", "merge_mm_kwargs",
          "apply_prompt_updates", "preprocessor_total")


def test_every_stage_timer_pairs_with_itself_and_every_lone_stage_says_why():
    pairs = [(v, lab) for v, lab in STAGE_MAP if v and lab]
    assert pairs == [(s, s) for s in SHARED]
    assert set(SHARED) == set(VLLM_STAGES)  # the lab reads vLLM's own TimingContext stages, all of them
    lone = {v or lab for v, lab in STAGE_MAP if not (v and lab)}
    assert lone == {"encoder_forward", "e2el", "media_decode", "hf_processor", "add_request", "add_request_kernel"}
    assert set(NO_PEER) == lone and all(NO_PEER[s] for s in lone)


def _stat(median_ms, low_ms, high_ms):
    return {"mean": median_ms, "median": median_ms, "std": 0.0, "p0.0": low_ms, "p100.0": high_ms}


def _bench():
    """vLLM's --output-json for 3 requests of 4 images (ms per request)."""
    stats = {f"{s}_ms": _stat(0.4, 0.2, 0.8) for s in SHARED}
    stats["apply_hf_processor_ms"] = _stat(40.0, 36.0, 48.0)
    stats["preprocessor_total_ms"] = _stat(42.0, 40.0, 48.0)  # 10,500 us per image
    stats["encoder_forward_ms"] = _stat(100.0, 90.0, 120.0)
    stats["num_encoder_calls"] = _stat(1.0, 1.0, 1.0)
    return {"completed": 3, "failed": 0, "median_e2el_ms": 200.0, "mean_e2el_ms": 210.0,
            "percentiles_e2el_ms": [[0.0, 180.0], [100.0, 260.0]], "mm_processor_stats": stats}


def test_vllm_figures_are_per_image_microseconds():
    got = vllm_figures(_bench(), images=4)
    # 40 ms per request of 4 images = 10,000 us per image; min 36 ms -> 9,000, max 48 ms -> 12,000
    assert got["apply_hf_processor"] == {"median_us": 10000.0, "min_us": 9000.0, "max_us": 12000.0, "samples": 3}
    assert got["e2el"]["median_us"] == 50000.0 and got["e2el"]["max_us"] == 65000.0
    assert "num_encoder_calls" not in got and got["encoder_forward"]["min_us"] == 22500.0


def test_vllm_figures_need_the_extremes_and_some_stats():
    bench = _bench()
    del bench["mm_processor_stats"]["apply_hf_processor_ms"]["p0.0"]
    with pytest.raises(UsageError, match="--metric-percentiles 0,100"):
        vllm_figures(bench, images=4)
    with pytest.raises(UsageError, match="no multimodal processor stats"):
        vllm_figures({"completed": 0, "mm_processor_stats": {}}, images=4)
    with pytest.raises(UsageError, match=">= 1"):
        vllm_figures(_bench(), images=0)


def _lab_rows():
    rows = [{"stage": s, "per_image_median_us": 100.0, "per_image_min_us": 50.0,
             "per_image_max_us": 200.0, "samples": 3} for s in SHARED]
    rows[2] = {"stage": "apply_hf_processor", "per_image_median_us": 10000.0,
               "per_image_min_us": 9500.0, "per_image_max_us": 11000.0, "samples": 3}
    rows[5] = {"stage": "preprocessor_total", "per_image_median_us": 10500.0, "per_image_min_us": 10000.0,
               "per_image_max_us": 12000.0, "samples": 3}
    for s in ("media_decode", "hf_processor", "add_request", "add_request_kernel"):
        rows.append({"stage": s, "per_image_median_us": 1.0, "per_image_min_us": 1.0, "per_image_max_us": 1.0,
                     "samples": 3})
    return rows


def test_rounds_pool_to_the_median_of_their_medians_and_the_widest_range():
    a = {"x": {"median_us": 100.0, "min_us": 90.0, "max_us": 130.0, "samples": 6}}
    b = {"x": {"median_us": 140.0, "min_us": 80.0, "max_us": 150.0, "samples": 6}}
    c = {"x": {"median_us": 110.0, "min_us": 100.0, "max_us": 120.0, "samples": 6}}
    assert pool_rounds([a, b]) == {"x": {"median_us": 120.0, "min_us": 80.0, "max_us": 150.0, "samples": 12,
                                         "rounds_us": [100.0, 140.0]}}
    assert pool_rounds([a, b, c])["x"]["median_us"] == 110.0
    with pytest.raises(UsageError, match="missing from some rounds"):
        pool_rounds([a, {}])


def _fig(median, low, high):
    return {"median_us": median, "min_us": low, "max_us": high, "samples": 1}


@pytest.mark.parametrize("vllm, lab, status, ratio", [
    (_fig(110, 100, 120), _fig(100, 90, 110), "within", 1.10),
    (_fig(115, 115, 115), _fig(100, 100, 100), "within", 1.15),  # the edge counts as within
    (_fig(80, 70, 90), _fig(100, 95, 105), "outside", 0.80),  # -20%, ranges 70-90 and 95-105 apart
    (_fig(130, 100, 140), _fig(100, 90, 105), "within_spread", 1.30),  # ranges 100-140 and 90-105 overlap
    (_fig(130, 120, 140), _fig(100, 90, 105), "outside", 1.30),
])
def test_stage_status(vllm, lab, status, ratio):
    got_status, got_ratio = stage_status(vllm, lab)
    assert got_status == status and got_ratio == pytest.approx(ratio)


def test_compare_and_verdict_when_everything_agrees():
    rows = compare("gemma4", pool_rounds([vllm_figures(_bench(), 4)]), pool_rounds([lab_figures(_lab_rows())]))
    assert [r["stage"] for r in rows] == [v or lab for v, lab in STAGE_MAP]
    by = {r["stage"]: r for r in rows}
    assert by["apply_hf_processor"]["ratio"] == pytest.approx(1.0) and by["apply_hf_processor"]["within_tolerance"]
    assert by["get_mm_hashes"]["ratio"] == pytest.approx(1.0)  # 0.4 ms / 4 images = 100 us
    assert by["media_decode"]["status"] == "no_peer" and by["media_decode"]["vllm_us"] is None
    assert "before any stage timer" in by["media_decode"]["note"]
    assert by["e2el"]["lab_us"] is None and by["e2el"]["ratio"] is None
    assert model_verdict(rows) == "gemma4: all 6 stages both sides time are within 15% of each other."


def test_verdict_names_each_stage_apart_with_its_measured_difference():
    bench = _bench()
    # vLLM's apply_hf_processor 52 ms per request (13,000 us per image, 12,500-14,000): 30% above, ranges apart
    bench["mm_processor_stats"]["apply_hf_processor_ms"] = _stat(52.0, 50.0, 56.0)
    # merge_mm_kwargs 0.6 ms (150 us per image), range 0.2-0.8 ms (50-200): 50% above, ranges overlap
    bench["mm_processor_stats"]["merge_mm_kwargs_ms"] = _stat(0.6, 0.2, 0.8)
    rows = compare("pixtral-llava", vllm_figures(bench, 4), lab_figures(_lab_rows()))
    by = {r["stage"]: r for r in rows}
    assert by["apply_hf_processor"]["status"] == "outside" and by["apply_hf_processor"]["ratio"] == pytest.approx(1.3)
    assert by["merge_mm_kwargs"]["status"] == "within_spread"
    text = model_verdict(rows)
    assert text.startswith("pixtral-llava: 4 of 6 stages both sides time are within 15% of each other; ")
    # +3,000 us per image, 3000 / 10500 = 28.6% of the lab's preprocessor_total
    assert "apply_hf_processor: vLLM's figure is 30% above the lab's and the ranges are apart" in text
    assert "+3000.0 us per image, 28.6% of the lab's preprocessor_total" in text
    assert "merge_mm_kwargs: vLLM's figure is 50% above the lab's, but the two request-to-request ranges overlap" in text


def test_compare_refuses_a_side_without_a_mapped_stage():
    lab = lab_figures([r for r in _lab_rows() if r["stage"] != "add_request"])
    with pytest.raises(UsageError, match="the lab's run has no add_request"):
        compare("gemma4", vllm_figures(_bench(), 4), lab)
    with pytest.raises(UsageError, match="one model's rows"):
        model_verdict([{"model": "a", "status": "within"}, {"model": "b", "status": "within"}])


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "labkit", "bench", "vllm-mmproc", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("args, words", [
    (["--images", "0"], "--images must be in 1..64"),
    (["--rounds", "9"], "--rounds must be in 1..8"),
    (["--image-size", "big"], "--image-size must look like"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    p = _cli(*args, "--no-save")
    assert p.returncode == 2, p.stderr
    assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_the_notebook_table_and_figure_show_both_figures_in_ms():
    from types import SimpleNamespace

    from labkit.viz.vllm import mmproc

    bench = _bench()
    bench["mm_processor_stats"]["apply_hf_processor_ms"] = _stat(52.0, 50.0, 56.0)
    rows = compare("gemma4", vllm_figures(bench, 4), lab_figures(_lab_rows()))
    result = SimpleNamespace(rows=rows, params={"tolerance": 0.15, "image_size": "1024x1536", "rounds": 1},
                             source="measured-cpu", slug="test-machine", name="vllm_mmproc")
    table = mmproc.side_by_side_table(result)
    hf = table[table["stage"] == "apply_hf_processor"].iloc[0]
    assert hf["vLLM's benchmark (ms/image)"] == pytest.approx(13.0) and hf["the lab's (ms/image)"] == pytest.approx(10.0)
    assert hf["vLLM / lab"] == pytest.approx(1.3) and hf["status"] == "outside"
    assert len(table) == len(STAGE_MAP)
    assert mmproc.verdicts(result) == ["gemma4: 5 of 6 stages both sides time are within 15% of each other; "
                                       "apply_hf_processor: " + hf["note"] + "."]
    fig = mmproc.plot_side_by_side(result)
    assert [t.name for t in fig.data] == ["vLLM's benchmark", "the lab's"]
    assert list(fig.data[0].y) == pytest.approx([0.1, 0.1, 13.0, 0.1, 0.1, 10.5])
    assert mmproc.side_by_side_table(None).empty and "no vllm_mmproc result" in mmproc.verdicts(None)[0]
