"""Each page's answer box, built from hand-made results: the numbers it states are worked out here
from the rows, and a missing result gives a sentence saying what to run."""

from __future__ import annotations

import re
from types import SimpleNamespace

from labkit.report import answers
from labkit.results import BenchResult


def res(name, slug, source, rows, gpu=None, params=None):
    machine = {"slug": slug, **({"gpu_name": gpu} if gpu else {})}
    return BenchResult(name=name, source=source, params=params or {}, rows=rows, machine=machine, size="full")


def text(answer) -> str:
    return re.sub(r"<[^>]+>", "", answer._repr_html_())


def test_answer_is_a_labkit_answer_element_with_sources():
    a = answers.Answer("x <b>1</b>", ("m/r.json (measured-cpu)",), "<p>d</p>")
    html = a._repr_html_()
    assert 'class="labkit-answer"' in html and "m/r.json (measured-cpu)" in html and "<p>d</p>" in html


def calibration(slug, tensor_ns, list_ns, source="measured-cpu"):
    return res("calibration", slug, source, [
        {"kind": "cpu", "variant": "tensor_index_int", "median_ns": tensor_ns},
        {"kind": "cpu", "variant": "list_index", "median_ns": list_ns}])


def test_environment_reads_this_machines_calibration():
    a = answers.environment([calibration("m1", 1200.0, 10.0), calibration("m2", 2400.0, 20.0)], machine="m2")
    t = text(a)
    assert "Recorded on this machine, m2 (full size)" in t and "2.4 us" in t and "20 ns" in t and "120x" in t
    assert "m11.21" in text(answers.Answer("", (), a.detail))  # the table lists every machine: m1, 1.2 us, ...
    assert a.sources == ("calibration recorded on m2 (measured-cpu, full size)",)
    assert "Recorded on m1" in text(answers.environment([calibration("m1", 1200.0, 10.0)], machine="m2"))
    assert "No calibration" in text(answers.environment([], machine="m1"))


def test_placeholder_scheduler_states_the_speedup():
    step = res("mm_decode_step", "m1", "measured-cpu", [
        {"combo": "tensor+loop", "num_requests": 128, "images_per_request": 32, "median_ns": 6e6,
         "speedup_vs_before": 1.0, "speedup_vs_pr": 0.2},
        {"combo": "list+loop", "num_requests": 128, "images_per_request": 32, "median_ns": 1.5e6,
         "speedup_vs_before": 4.0, "speedup_vs_pr": 1.0},
        {"combo": "fast+cursor", "num_requests": 128, "images_per_request": 32, "median_ns": 30e3,
         "speedup_vs_before": 200.0, "speedup_vs_pr": 50.0}])
    t = text(answers.placeholder_scheduler([step]))
    assert "1.5 ms against 6 ms" in t and "4x faster" in t
    assert "fast+cursor" in t and "30 us" in t and "TPOT" not in t


def engine_rows(tensor, lst, idle_before, idle_after):
    return [{"variant": "tensor/loop/none/async", "tokens_per_s": tensor, "device_idle_frac": idle_before},
            {"variant": "list/loop/none/async", "tokens_per_s": lst, "device_idle_frac": idle_after}]


def test_idle_bubbles_prefers_the_gpu_measurement():
    sim = res("engine", "cpu", "simulated", engine_rows(100.0, 110.0, 0.5, 0.4))
    gpu = res("engine_quick", "h200", "measured-gpu", engine_rows(200.0, 5000.0, 0.8, 0.25), gpu="NVIDIA H200")
    t = text(answers.idle_bubbles([sim, gpu]))
    assert "NVIDIA H200" in t and "idles 80% of the run with tensor placeholders, 25% with list ones" in t
    assert "tok/s" not in t  # the mechanism, not a rival answer to the published gain


def test_h2d_prefix_ranges_at_the_smallest_layer_count():
    rows = [{"variant": "per_layer", "layers": 34, "model": "g4", "median_ns": 100e6, "h2d_per_step": 4386, "sync_per_step": 4386},
            {"variant": "per_step", "layers": 34, "model": "g4", "median_ns": 1e6, "h2d_per_step": 1, "sync_per_step": 1},
            {"variant": "per_layer", "layers": 62, "model": "g27", "median_ns": 300e6, "h2d_per_step": 7998, "sync_per_step": 7998},
            {"variant": "per_step", "layers": 62, "model": "g27", "median_ns": 2e6, "h2d_per_step": 1, "sync_per_step": 1}]
    idle = [{"variant": "per_layer", "layers": 34, "idle_fraction": 0.9}, {"variant": "per_step", "layers": 34, "idle_fraction": 0.1}]
    t = text(answers.h2d_prefix_ranges([res("h2d_step", "h200", "measured-gpu", rows, gpu="H200"),
                                        res("h2d_gpu_idle", "h200", "measured-gpu", idle, gpu="H200")]))
    assert "g4's 34 layers" in t and "4,386 host-to-device copies" in t and "100 ms" in t and "100x" in t
    assert "90% of a per-layer step and 10%" in t


def test_prefix_attention_picks_the_case_with_the_largest_gain_and_needs_a_gpu():
    rows = [{"variant": v, "case": c, "median_ms": ms, "tflops": 100.0, "max_abs_err": 0.01}
            for c, vals in (("a", (1.0, 1.5, 2.0)), ("b", (0.5, 1.0, 5.0)))
            for v, ms in zip(("triton_prefix", "flex_attention", "sdpa_mask"), vals)]
    t = text(answers.prefix_attention([res("attn_bench", "h200", "measured-gpu", rows, gpu="H200")]))
    assert "runs b in 0.5 ms" in t and "5 ms for SDPA" in t and "10x" in t and "1 ms for FlexAttention" in t
    interp = res("attn_bench", "cpu", "interpreted", [{"variant": "triton_prefix", "case": "tiny"}])
    assert "No GPU attention result" in text(answers.prefix_attention([interp]))


def test_trace_analysis_per_step_from_the_summaries():
    def an(h2d, pageable, idle, busy):
        return SimpleNamespace(source=lambda: {"gpu": "H200", "kind": "measured-gpu", "file": "t.json.gz"},
                               summary=lambda: {"h2d_count": h2d, "pageable_h2d_count": pageable, "idle_us": idle,
                                                "busy_us": busy, "steps_count": 2})
    lab = {"fast/cursor/per_layer/async": an(8000, 7000, 1_800_000.0, 200_000.0),
           "fast/cursor/per_step/async": an(10, 2, 60_000.0, 140_000.0)}
    t = text(answers.trace_analysis(lab))
    assert "4,000 host-to-device copies per step (3,500 from pageable" in t and "against 5 after" in t
    assert "900 ms per step (90% of the traced time) against 30 ms (30%)" in t
    assert "not recorded" in text(answers.trace_analysis({}))


def test_compare_gpus_spans_the_host_figure_from_the_fastest_machine_to_the_slowest():
    rs = [calibration("a", 1000.0, 10.0), calibration("b", 1500.0, 12.0, source="measured-gpu"),
          calibration("c", 1200.0, 11.0), res("engine", "b", "measured-gpu", [{"variant": "x"}])]
    a = answers.compare_gpus(rs)
    assert "from 1 us on a to 1.5 us on b (1.5x)" in text(a)
    assert a.sources == ("calibration recorded on a (measured-cpu, full size)",
                         "calibration recorded on b (measured-gpu, full size)")
    assert "No calibration" in text(answers.compare_gpus([]))


def test_next_bubble_installed_against_patched_and_the_idle_bound():
    rows = [{"machine": "m", "source": "measured-cpu", "vllm_version": "0.33.0", "num_requests": 128, "images": 32,
             "variant": "installed", "median_ns": 100e6},
            {"machine": "m", "source": "measured-cpu", "vllm_version": "0.33.0", "num_requests": 128, "images": 32,
             "variant": "patched", "median_ns": 1e6}]
    t = text(answers.next_bubble(rows, device_step_ms=25.0, step_from="here"))
    assert "100 ms of host time per step, patched 1 ms (100x)" in t
    assert "idle 75% of an installed step and 0% of a patched one" in t  # 1 - 25/100, max(25, 1) = 25
    assert "No vllm_prefix_ranges result" in text(answers.next_bubble([], device_step_ms=25.0))


def test_inside_vllm_reads_the_one_answers_results(tmp_path):
    from findings_results import write_results
    from labkit.results import load_results

    write_results(tmp_path)
    a = answers.inside_vllm_answer(load_results(tmp_path))
    t = text(a)
    assert t.startswith("What this page finds. On an H200, peak ratio 1.53x predicted, 1.48x published; the "
                        "whole-run gain (1.27x published) is not predicted")  # findings_results, worked by hand there
    assert "cut 8 ms from vLLM's engine-core host step at 128 x 32." in t
    assert "peak 9,600 tok/s predicted, 9,088 tok/s published" in t
    assert "tensor read comes out at 2 us" in t
    assert len(t.split("From:")[0].split()) <= 80 + 30  # the box's words, the bar labels aside
    assert "pr_table recorded on cpu-a (simulated, full size)" in a.sources
    assert "No full pr_table" in text(answers.inside_vllm_answer([]))
