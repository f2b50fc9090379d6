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


def test_placeholder_scheduler_states_the_speedup_and_explained_share():
    step = res("mm_decode_step", "m1", "measured-cpu", [
        {"combo": "tensor+loop", "num_requests": 128, "images_per_request": 32, "median_ns": 6e6,
         "speedup_vs_before": 1.0, "speedup_vs_pr": 0.2},
        {"combo": "list+loop", "num_requests": 128, "images_per_request": 32, "median_ns": 1.5e6,
         "speedup_vs_before": 4.0, "speedup_vs_pr": 1.0},
        {"combo": "fast+cursor", "num_requests": 128, "images_per_request": 32, "median_ns": 30e3,
         "speedup_vs_before": 200.0, "speedup_vs_pr": 50.0}])
    ov = res("mm_overlap", "m1", "simulated", [
        {"case": "measured", "host_saving_ms": 4.5, "explained_fraction": 0.45,
         "predicted_tpot_after_async_ms": 29.0, "published_tpot_after_ms": 24.58}])
    t = text(answers.placeholder_scheduler([step, ov]))
    assert "1.5 ms against 6 ms" in t and "4x faster" in t
    assert "fast+cursor" in t and "30 us" in t
    assert "45% of the published TPOT gain" in t and "simulated" in t
    assert "mm_overlap recorded on m1 (simulated, full size)" in t


def engine_rows(tensor, lst, idle_before, idle_after):
    return [{"variant": "tensor/loop/none/async", "tokens_per_s": tensor, "device_idle_frac": idle_before},
            {"variant": "list/loop/none/async", "tokens_per_s": lst, "device_idle_frac": idle_after}]


def test_idle_bubbles_prefers_the_gpu_measurement():
    sim = res("engine", "cpu", "simulated", engine_rows(100.0, 110.0, 0.5, 0.4))
    gpu = res("engine_quick", "h200", "measured-gpu", engine_rows(200.0, 5000.0, 0.8, 0.25), gpu="NVIDIA H200")
    t = text(answers.idle_bubbles([sim, gpu]))
    assert "NVIDIA H200" in t and "5,000 tok/s against 200 tok/s" in t and "25x" in t
    assert "80% of the run before and 25% after" in t


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
        return SimpleNamespace(source={"gpu": "H200", "kind": "measured-gpu", "file": "t.json.gz"},
                               summary={"h2d_count": h2d, "pageable_h2d_count": pageable, "idle_us": idle,
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


def census(slug="m"):
    rows = []
    for phase, base, merged in (("schedule", 3000.0, 1000.0), ("schedule_alone", 2000.0, 1000.0),
                                ("schedule_alone_swept", 3500.0, 1000.0),
                                ("step", 9000.0, 6000.0), ("prepare_inputs", 1000.0, 900.0)):
        for v, us in (("baseline", base), ("merged", merged)):
            rows.append({"num_requests": 128, "images": 32, "variant": v, "phase": phase, "median_us": us})
    return res("vllm_step", slug, "measured-cpu", rows)


def test_inside_vllm_falls_back_to_the_census():
    t = text(answers.inside_vllm_answer([], censuses=[census()]))
    assert "2 ms of schedule() per decode step" in t and "of a 3 ms step saving" in t
    assert "2x what the engine's scheduler driven alone saves back to back (1 ms)" in t
    assert "evicts the scheduler's data" in t and "swept between its steps, the scheduler alone saves 2.5 ms" in t


def _sim_rows(gpu, base_tpot, after_tpot, ratio):
    rows = [{"kind": "ratio", "arm": "pr40143/baseline", "gpu": gpu, "metric": "output_throughput_ratio",
             "predicted": ratio, "published": 1.27, "error": (ratio - 1.27) / 1.27}]
    for arm, pred, pub in (("baseline", base_tpot, 33.81), ("pr40143", after_tpot, 24.58)):
        rows.append({"kind": "metric", "arm": arm, "gpu": gpu, "metric": "mean_tpot_ms", "predicted": pred,
                     "published": pub, "error": (pred - pub) / pub})
    rows.append({"kind": "phase", "arm": "baseline", "gpu": gpu, "phase": "tail", "steps": 10})
    return rows


def test_inside_vllm_reads_the_named_gpus_serve_sim():
    # h200 is the GPU the result names; the h100 rows after it are not its answer
    sim = res("serve_sim", "m", "simulated", _sim_rows("h200", 20.0, 16.0, 1.25) + _sim_rows("h100", 40.0, 30.0, 1.5),
              params={"gpu": ["h200", "h100"], "fitted": {}})
    t = text(answers.inside_vllm_answer([sim], censuses=[census()]))
    assert "simulated h200" in t and "nothing fitted" in t
    assert "ratio 1.25x against the published 1.27x (error -1.57%)" in t
    assert "shorter than published on both arms" in t and "mean TPOT 20 ms / 16 ms against 33.8 ms / 24.6 ms" in t
    assert "the ratio holds within 10%" in t and "schedule()" not in t


def test_inside_vllm_serve_sim_says_a_miss_of_the_ratio_and_a_fit():
    sim = res("serve_sim", "m", "simulated", _sim_rows("h100", 40.0, 30.0, 1.5),
              params={"gpu": "h100", "fitted": {"device_scale": 2.0}})
    t = text(answers.inside_vllm_answer([sim], censuses=[census()]))
    assert "fitted: device_scale" in t and "ratio 1.5x" in t
    assert "the ratio holds" not in t and "The absolute times miss" in t  # 40 > 33.81: not shorter on both


def test_inside_vllm_adds_the_device_fit_and_says_why_the_ratio_falls():
    sim = res("serve_sim", "m", "simulated", _sim_rows("h200", 20.0, 16.0, 1.25), params={"gpu": "h200", "fitted": {}})
    # device fitted: after-TPOT at the published 24.58, baseline 25 ms (host hidden), ratio 1.0
    fit = res("serve_sim_device_scale", "m", "simulated", _sim_rows("h200", 25.0, 24.58, 1.0),
              params={"gpu": "h200", "fitted": {"device_scale": 1.6}})
    a = answers.inside_vllm_answer([sim, fit], censuses=[census()])
    t = text(a)
    assert "fitted to pr40143's published mean TPOT (x 1.6" in t and "the ratio is 1x" in t
    assert "baseline's mean TPOT 25 ms against the published 33.8 ms" in t and "hides behind" in t
    assert "serve_sim_device_scale recorded on m (simulated, full size)" in a.sources
    # a fit that keeps the gain says nothing of hiding
    fit_ok = res("serve_sim_device_scale", "m", "simulated", _sim_rows("h200", 33.0, 24.58, 1.3),
                 params={"gpu": "h200", "fitted": {"device_scale": 1.6}})
    assert "hides behind" not in text(answers.inside_vllm_answer([sim, fit_ok], censuses=[census()]))


def _spread_rows(gpu, base, after):
    """finish-spread rows: the published ones as #40143's table gives them (4.81 / 4.49 s)."""
    return [{"kind": "metric", "arm": arm, "gpu": gpu, "metric": "finish_spread_s", "predicted": pred,
             "published": pub, "error": (pred - pub) / pub}
            for arm, pred, pub in (("baseline", base, 4.81), ("pr40143", after, 4.49))]


def test_inside_vllm_says_the_requests_finished_apart_and_the_handovers():
    sim = res("serve_sim", "m", "simulated", _sim_rows("h200", 20.0, 16.0, 1.25) + _spread_rows("h200", 38.8, 42.5),
              params={"gpu": "h200", "fitted": {}})
    t = text(answers.inside_vllm_answer([sim], censuses=[census()]))
    assert "duration less the mean E2E latency" in t and "is 4.81 s / 4.49 s, the simulated run's 38.8 s / 42.5 s" in t
    assert "decoded side by side" in t
    # a simulated spread like the published one claims nothing
    close = res("serve_sim", "m", "simulated", _sim_rows("h200", 20.0, 16.0, 1.25) + _spread_rows("h200", 5.0, 4.6),
                params={"gpu": "h200", "fitted": {}})
    assert "decoded side by side" not in text(answers.inside_vllm_answer([close], censuses=[census()]))
    # the real server's handovers: first at half the last, one after another would be 1/24
    ho = res("vllm_handover", "m", "measured-cpu", [{"kind": "request", "order": 0, "api_send_s": 1.0}],
             params={"images_per_request": 32, "summary": {"requests": 24, "handover": {"first_frac": 0.5, "mean_frac": 0.8},
                                                           "one_after_another": {"first_frac": 1 / 24,
                                                                                 "mean_frac": 25 / 48}}})
    a = answers.inside_vllm_answer([sim, ho], censuses=[census()])
    assert "24 requests x 32 images sent at once) the first request reached the engine at 50% of the last" in text(a)
    assert "not the 4.17% one after another would give" in text(a) and "vllm_handover recorded on m (measured-cpu, full size)" in a.sources
    assert "held the GIL" not in text(a)  # not profiled
    ho.params["summary"]["gil"] = {"stages": {"HTTP body in": {"share": 0.5, "per_request_s": 0.3},
                                              "JSON parse": {"share": 0.25, "per_request_s": 0.15},
                                              "other": {"share": 0.25, "per_request_s": 0.15}}}
    t = text(answers.inside_vllm_answer([sim, ho], censuses=[census()]))
    assert "held the GIL 0.6 s per request (py-spy), 50% of it for HTTP body in" in t
