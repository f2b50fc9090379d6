"""Steps found without ``--steps``: ProfilerStep#N, else vLLM's execute_context_* / execute_model markers."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from real_traces import shared_trace

from labkit.cli import main as labkit_main
from labkit.trace import Trace
from labkit.trace.read.load import load_trace
from labkit.trace.analysis.host.steps import NO_STEPS_NOTE, detect_steps

DATA = Path(__file__).resolve().parent / "data"
NVLLM_STEP = DATA / "nvllm-gb10-one-step.trimmed.pt.trace.json.gz"
#: the vLLM GB10 trace's ten step markers, phase frames and copies (a fixture); the whole trace where present
NVLLM_TEN = [DATA / "nvllm-gb10-ten-steps.markers-and-copies.pt.trace.json.gz",
             *shared_trace("nvllm-vllm-qwen3.5-27b-nvfp4-flashinfer-gb10-rank0.pt.trace.json.gz")]


def _x(cat, name, ts, dur, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _write(tmp_path, events, name="t.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_repeated_vllm_step_names_are_all_steps(tmp_path):
    label = "execute_context_0(0)_generation_4(4)"
    ev = [_x("user_annotation", label, t, 80) for t in (0, 100, 200)]
    ev += [_x("python_function", "vllm/v1/worker/gpu_model_runner.py(1779): _prepare_inputs", t + 5, 20)
           for t in (0, 100, 200)]
    ev += [_x("python_function", "vllm/v1/worker/gpu_model_runner.py(2000): _model_forward", 110, 50)]
    steps, info = detect_steps(load_trace(_write(tmp_path, ev)))
    assert steps["start_us"].tolist() == [0, 100, 200] and steps["dur_us"].tolist() == [80, 80, 80]
    assert info["source"] == "vllm execute_context" and info["model_runner"] == "v1" and info["note"] is None
    an = Trace(_write(tmp_path, ev))
    ph = {(r.step, r.phase): r.host_us for r in an.step_phases().itertuples()}
    assert ph == {(0, "_prepare_inputs"): 20, (1, "_prepare_inputs"): 20, (1, "_model_forward"): 50,
                  (2, "_prepare_inputs"): 20}


def test_model_runner_v2_execute_model_frames(tmp_path):
    ev = [_x("python_function", "vllm/v1/worker/gpu/model_runner.py(812): execute_model", t, 40) for t in (0, 50)]
    ev.append(_x("python_function", "vllm/v1/worker/gpu/model_runner.py(900): _sample", 30, 30))  # ends past step 0
    steps, info = detect_steps(load_trace(_write(tmp_path, ev)))
    assert len(steps) == 2 and info["source"] == "vllm execute_model" and info["model_runner"] == "v2"
    an = Trace(_write(tmp_path, ev))
    assert an.step_phases()[["step", "phase", "host_us"]].values.tolist() == [[0, "_sample", 10.0]]  # clipped at 40


def test_profiler_steps_win_and_nested_duplicates_drop(tmp_path):
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 50), _x("cpu_op", "ProfilerStep#1", 0, 50),
          _x("user_annotation", "ProfilerStep#2", 50, 50), _x("user_annotation", "execute_context_1", 10, 5)]
    steps, info = detect_steps(load_trace(_write(tmp_path, ev)))
    assert steps["name"].tolist() == ["ProfilerStep#1", "ProfilerStep#2"] and info["source"] == "ProfilerStep"


def test_no_step_markers_get_a_note(tmp_path, capsys):
    p = _write(tmp_path, [_x("cpu_op", "aten::mm", 0, 10)])
    an = Trace(p)
    assert len(an.steps()) == 0 and an.step_detection()["note"] == NO_STEPS_NOTE
    assert an.to_json()["step_detection"]["note"] == NO_STEPS_NOTE
    assert labkit_main(["analyze", str(p)]) == 0
    assert "note: no step markers" in capsys.readouterr().out


def test_real_vllm_step_phases_against_raw_json():
    """Phase host time of the trimmed vLLM step, summed straight from the JSON."""
    with gzip.open(NVLLM_STEP, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    step = next(e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_context"))
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    rx = re.compile(r"gpu_model_runner\.py\(\d+\): _model_forward$")
    want = sum(min(e["ts"] + e["dur"], t1) - e["ts"] for e in events
               if e.get("cat") == "python_function" and rx.search(e["name"]) and t0 <= e["ts"] < t1)
    an = Trace(NVLLM_STEP)
    assert an.step_detection()["source"] == "vllm execute_context" and an.step_detection()["model_runner"] == "v1"
    assert len(an.steps()) == 1 and an.steps()["dur_us"].iloc[0] == pytest.approx(step["dur"])
    got = an.step_phases().set_index("phase")["host_us"]
    assert want > 0 and got["_model_forward"] == pytest.approx(want)


@pytest.mark.parametrize("path", NVLLM_TEN, ids=lambda p: p.name[:40])
def test_vllm_trace_ten_steps_printed(path, capsys):
    """The ten decode steps of the GB10 run (ten ``execute_context_*`` annotations in the JSON)
    are found, printed and timed as the annotations say."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        marks = sorted((e["ts"], e["dur"]) for e in json.load(f)["traceEvents"]
                       if e.get("cat") == "user_annotation" and e["name"].startswith("execute_context"))
    assert len(marks) == 10
    assert labkit_main(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "steps: 10 from vllm execute_context markers, model runner v1" in out
    an = Trace(path)
    assert an.steps()["start_us"].tolist() == [t for t, _ in marks]
    assert an.steps()["dur_us"].tolist() == pytest.approx([d for _, d in marks])
