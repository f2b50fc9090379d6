"""``labkit bench serve-sim`` at quick size on vLLM's real scheduler (run in .venv-vllm-cpu).

The run itself (every request runs to its last token, the steps' shapes follow the prompts, each
step the step model's) and
the arms' code paths: under ``baseline`` and ``pr40143`` (vLLM 0.20's scheduler loop) a decode
step visits every image of every running request (``get_num_embeds`` called per image); under
``merged`` (the installed windowed scheduler) it visits none.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm_cpu.sh)")

from labkit.vllm.serving import ServeWorkload, get_workload, make_vllm_requests, prompt_layout  # noqa: E402


def _device(shape):
    return 1e6 + 1e3 * len(shape.decode_context_lens) + 100.0 * shape.prefill_tokens + 5e5 * shape.images_encoded


class _FixedHost:
    def core_ns(self, shape):
        return 2e5 * shape.num_requests

    def frontend_ns(self, outputs):
        return 1e5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from labkit.vllm.census.sched_census import write_model_config

    return write_model_config(tmp_path_factory.mktemp("serve-sim-model"))


def test_quick_run_every_request_to_its_end(model_dir):
    from labkit.serve.api_server import Intake
    from labkit.serve.clock import simulate
    from labkit.vllm.serving import ServeConfig, VllmDriver, kv_blocks_for, make_serving_scheduler
    from labkit.vllm.ab import patched_vllm

    w = get_workload("quick")
    prompt, spans = prompt_layout(w)
    cfg = ServeConfig(num_blocks=kv_blocks_for(w.requests, prompt, w.output_tokens), max_item_tokens=spans[0].length)
    with patched_vllm("pr40143"):
        drv = VllmDriver(make_serving_scheduler(model_dir, cfg), make_vllm_requests(w, prefix="t-"))
        tl = simulate(drv, requests=w.requests, intake=Intake(5e6, 0.0, 0.0, w.images), host=_FixedHost(),
                      device=_device)
    assert [len(ts) for ts in tl.token_ns] == [w.output_tokens] * w.requests
    # request i's inputs are done at 5 ms x (i + 1) at the earliest; its first token comes after
    for i, ts in enumerate(tl.token_ns):
        assert ts[0] > tl.handover_ns[i] >= 5e6 * (i + 1)
        assert ts == sorted(ts)
    # every prompt token is prefilled once and every image encoded once
    assert sum(s.prefill_tokens for s in tl.steps) == w.requests * prompt
    assert sum(s.images_encoded for s in tl.steps) == w.requests * w.images
    # each step is the step model's: async, max(device, host)
    assert all(s.end_ns - s.start_ns == max(s.device_ns, s.core_host_ns) for s in tl.steps)


def _embeds_calls_per_decode_step(arm: str, model_dir) -> tuple[int, int]:
    from vllm.multimodal.inputs import PlaceholderRange

    from labkit.vllm.serving import ServeConfig, VllmDriver, kv_blocks_for, make_serving_scheduler
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


def test_cli_with_bad_arms_exits_2(capsys):
    from labkit.cli import main

    assert main(["bench", "serve-sim", "--arms", "nope", "--no-save"]) == 2
    assert "arms" in capsys.readouterr().err


def test_quick_serve_sim_end_to_end():
    """A workload other than #40143's end to end: the census machine's census, its server's intake and
    overlap, the GPU node's unit costs, the roofline, vLLM's scheduler; nothing compared, nothing inferred."""
    from labkit.serve.bench_serve_sim import predict
    from labkit.vllm.serving import WORKLOADS

    res, check = predict(WORKLOADS["quick"], ("h200",), ("baseline", "pr40143"))
    assert check.name == "serve_sim_check" and check.rows  # checked against the recorded server runs first
    assert res.name == "pr_table_quick" and res.params["fitted"] == {} and res.params["inferred"] == {}
    got = {(r["arm"], r["metric"]): r for r in res.rows}
    assert {m for _, m in got} == {"peak_output_tok_s", "output_tok_s", "mean_tpot_ms", "mean_ttft_s", "duration_s"}
    assert all(r["published"] is None and r["predicted"] > 0 for r in res.rows)
    # the baseline's chain holds the tensor reads: never a shorter step than pr40143's
    assert got[("baseline", "mean_tpot_ms")]["predicted"] >= got[("pr40143", "mean_tpot_ms")]["predicted"]
