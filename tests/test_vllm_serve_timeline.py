"""vLLM's server timed per request and per step: the bench file's per-request lists and the server
log's iteration lines, read into ``vllm_serve_timeline`` rows (hand-worked cases, vLLM's own log format)."""

from __future__ import annotations

import pytest

from labkit.errors import UsageError
from labkit.results import VLLM_SERVE_TIMELINE, find_all
from labkit.vllm.server.timeline import engine_settings, ingest_timeline, request_rows, step_rows

#: lines as vLLM 0.32's API server logs them (one with encoder inputs, one decode step, one dummy step)
LOG = """\
(APIServer pid=1) INFO 12-06 04:52:13 [api_utils.py:286] non-default args: {'model_tag': '/m', 'host': '127.0.0.1', \
'model': '/m', 'max_model_len': 8528, 'enforce_eager': True, 'limit_mm_per_prompt': {'image': 32}, \
'max_num_batched_tokens': 2048, 'max_num_seqs': 2}
(APIServer pid=1) INFO 12-06 04:53:01 [loggers.py:199] Engine 000: Iteration(0): 1 context requests, 2048 context \
tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 960.67 ms, CPU KV cache usage: 0.0%, \
encoder inputs: 8, encoder output embeddings: 2080
(APIServer pid=1) INFO 12-06 04:53:04 [loggers.py:199] Engine 000: Iteration(9): 0 context requests, 0 context \
tokens, 2 generation requests, 2 generation tokens, iteration elapsed time: 6.81 ms, CPU KV cache usage: 0.1%
(APIServer pid=1) INFO 12-06 04:53:04 [loggers.py:199] Engine 000: Iteration(10): 0 context requests, 0 context \
tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 0.00 ms (dummy), CPU KV cache usage: 0.1%
"""

BENCH = {"start_times": [10.0, 10.5, 10.7], "ttfts": [2.0, 1.0, 0.0], "itls": [[0.1, 0.2], [0.3], []],
         "latencies": [2.3, 1.3, 0.0], "errors": ["", "", "connection reset"]}


def test_requests_by_hand():
    rows = request_rows(BENCH)
    assert [r["request"] for r in rows] == [0, 1]  # the failed one left out
    a, b = rows
    assert (a["sent_s"], a["first_token_s"], a["output_tokens"], a["itl_ms"]) == (0.0, 2.0, 3, [100.0, 200.0])
    assert a["finish_s"] == pytest.approx(2.3)
    assert b["sent_s"] == pytest.approx(0.5) and b["first_token_s"] == pytest.approx(1.5)
    assert b["finish_s"] == pytest.approx(1.8) and b["output_tokens"] == 2 and b["itl_ms"] == [300.0]
    with pytest.raises(UsageError, match="--save-detailed"):
        request_rows({"latencies": [1.0]})


def test_steps_and_settings_from_the_log():
    assert step_rows(LOG) == [
        {"kind": "step", "iteration": 0, "log_time": "04:53:01", "ctx_requests": 1, "ctx_tokens": 2048,
         "gen_requests": 0, "gen_tokens": 0, "encoder_inputs": 8, "encoder_tokens": 2080, "elapsed_ms": 960.67},
        {"kind": "step", "iteration": 9, "log_time": "04:53:04", "ctx_requests": 0, "ctx_tokens": 0,
         "gen_requests": 2, "gen_tokens": 2, "encoder_inputs": 0, "encoder_tokens": 0, "elapsed_ms": 6.81},
    ]
    assert engine_settings(LOG) == {"model": "/m", "max_model_len": 8528, "enforce_eager": True,
                                    "limit_mm_per_prompt": {"image": 32}, "max_num_batched_tokens": 2048,
                                    "max_num_seqs": 2}


def test_runs_of_other_arms_and_shapes_are_kept_and_a_rerun_replaces_its_own(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG)
    machine = {"slug": "cpu-x", "device": "cpu"}
    shape = {"num_prompts": 3, "images": 32, "image_size": "1024x1536", "output_len": 3}
    for arm in ("baseline", "pr40143", "baseline"):
        ingest_timeline(BENCH, log, variant=arm, shape=shape, repeat=1, machine=machine, vllm_version="0.32.0",
                        results_root=tmp_path / "results")
    res = find_all(VLLM_SERVE_TIMELINE, root=tmp_path / "results")[0]
    assert res.source == "measured-cpu"
    count = {(arm, kind): sum(r["variant"] == arm and r["kind"] == kind for r in res.rows)
             for arm in ("baseline", "pr40143") for kind in ("request", "step")}
    assert count == {("baseline", "request"): 2, ("baseline", "step"): 2, ("pr40143", "request"): 2,
                     ("pr40143", "step"): 2}
    assert set(res.params["engine_settings"]) == {"baseline/3x32x1024x1536/out3/r1", "pr40143/3x32x1024x1536/out3/r1"}
    empty = tmp_path / "empty.log"
    empty.write_text("no iterations here\n")
    with pytest.raises(UsageError, match="enable-logging-iteration-details"):
        ingest_timeline(BENCH, empty, variant="baseline", shape=shape, repeat=2, machine=machine, vllm_version=None,
                        results_root=tmp_path / "results")


def _timers(folder):
    """The server's timers for BENCH's two completed requests and LOG's two steps, on the client's clock."""
    import json

    folder.mkdir()
    api = [{"id": 0, "handler_s": 10.2, "media": [[10.3, 10.3, 10.6]], "processor": [[10.6, 10.7, 11.0]],
            "handover_s": 11.1, "first_output_s": 12.0, "finish_s": 12.3},
           {"id": 1, "handler_s": 10.6, "media": [[10.7, 10.8, 11.1]], "processor": [[11.1, 11.1, 11.4]],
            "handover_s": 11.5, "first_output_s": 11.5, "finish_s": 11.8}]
    core = [{"schedule_s": [11.2, 11.21], "update_s": [12.0, 12.01], "tokens": 2048, "requests": 1},
            {"schedule_s": [12.02, 12.021], "update_s": [12.03, 12.031], "tokens": 2, "requests": 2}]
    (folder / "api-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in api))
    (folder / "core-2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in core))
    return folder


def test_the_figure_by_hand(tmp_path):
    from labkit.viz.vllm.inside_vllm import INTAKE_SPANS, NO_TIMELINE, plot_serve_timeline

    log = tmp_path / "server.log"
    log.write_text(LOG)
    timers = _timers(tmp_path / "timers")
    shape = {"num_prompts": 3, "images": 32, "image_size": "1024x1536", "output_len": 3}
    for arm in ("baseline", "pr40143"):
        ingest_timeline(BENCH, log, variant=arm, shape=shape, repeat=1, machine={"slug": "cpu-x", "device": "cpu"},
                        vllm_version=None, timers=timers, results_root=tmp_path / "results")
    fig = plot_serve_timeline(find_all(VLLM_SERVE_TIMELINE, root=tmp_path / "results")[0])
    per_arm = len(INTAKE_SPANS) + 2  # the spans, the client's gaps, the engine's steps
    assert len(fig.data) == 2 * per_arm and len(fig.layout.updatemenus[0].buttons) == 2
    parsed, processor = fig.data[0], fig.data[3]
    # in the order handed over (request 0 at 1.1 s, request 1 at 1.5 s), seconds from the first send at 10.0
    assert list(parsed.base) == [0.0, 0.0] and list(parsed.x) == pytest.approx([0.2, 0.6])
    assert list(processor.base) == pytest.approx([0.7, 1.1]) and list(processor.x) == pytest.approx([0.3, 0.3])
    itl, steps = fig.data[per_arm - 2], fig.data[per_arm - 1]
    assert list(itl.x) == pytest.approx([2.1, 2.3, 1.8]) and list(itl.y) == [100.0, 200.0, 300.0]
    # each step at its end on the same clock, its length as vLLM logged it
    assert list(steps.x) == pytest.approx([2.01, 2.031]) and list(steps.y) == pytest.approx([960.67, 6.81])
    assert [t.visible for t in fig.data] == [True] * per_arm + [False] * per_arm
    assert plot_serve_timeline(None).layout.annotations[0].text == NO_TIMELINE


def test_the_summary_by_hand(tmp_path):
    from labkit.viz.vllm.inside_vllm import timeline_summary

    log = tmp_path / "server.log"
    log.write_text(LOG)
    ingest_timeline(BENCH, log, variant="baseline", repeat=1, machine={"slug": "cpu-x", "device": "cpu"},
                    shape={"num_prompts": 3, "images": 32, "image_size": "1024x1536", "output_len": 3},
                    vllm_version=None, results_root=tmp_path / "results")
    row = timeline_summary(find_all(VLLM_SERVE_TIMELINE, root=tmp_path / "results")[0]).iloc[0]
    assert (row["arm"], row["shape"], row["requests"]) == ("baseline", "3 x 32 x 1024x1536", 2)
    assert row["first_token_spread_s"] == pytest.approx(0.5) and row["finish_spread_s"] == pytest.approx(0.5)
    assert row["client_mean_itl_ms"] == pytest.approx(200.0)  # (100 + 200 + 300) / 3
    assert row["decode_only_step_ms"] == 6.81 and row["step_with_prefill_ms"] is None  # no step had both
    assert timeline_summary(None).empty
