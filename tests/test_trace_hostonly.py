"""Host-only traces (vLLM's engine on a CPU): the call sites between steps.

Hand-made traces check the attribution exactly; two trimmed real traces of vLLM 0.32's CPU
build (tests/data/README.md) check that `labkit analyze` reads such a run: steps found, no
device stream, and the baseline's scheduler placeholder calls among the top host call sites.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from labkit.trace import Trace
from labkit.trace.analysis.host.callsite import between_step_call_sites
from labkit.trace.analysis.host.steps import between_step_windows
from labkit.trace.read.load import as_trace
from labkit.trace.analysis.host.steps import detect_steps

DATA = Path(__file__).resolve().parent / "data"
BASELINE = DATA / "vllm-cpu-gemma4-baseline.trimmed.pt.trace.json.gz"
MERGED = DATA / "vllm-cpu-gemma4-merged.trimmed.pt.trace.json.gz"
PLACEHOLDER_SITES = ("): get_num_embeds", "): _try_schedule_encoder_inputs")


def _x(cat, name, ts, dur, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_windows_run_from_each_step_end_to_the_next_start_per_thread():
    steps = pd.DataFrame({"start_us": [0.0, 20.0, 50.0, 5.0, 9.0], "end_us": [10.0, 30.0, 60.0, 8.0, 12.0],
                          "pid": [1, 1, 1, 1, 1], "tid": [1, 1, 1, 2, 2]})
    w = between_step_windows(steps)
    got = sorted(zip(w["tid"], w["start_us"], w["end_us"]))
    assert got == [(1, 10.0, 20.0), (1, 30.0, 50.0), (2, 8.0, 9.0)]
    assert len(between_step_windows(steps.head(1))) == 0


def test_call_sites_between_steps_are_the_innermost_frames(tmp_path):
    name = "execute_context_0(0)_generation_1(1)"
    events = [_x("user_annotation", name, 0, 10), _x("user_annotation", name, 20, 10),
              _x("python_function", "vllm/v1/core/sched/scheduler.py(1): schedule", 12, 6),
              _x("cpu_op", "aten::select", 14, 2),
              _x("python_function", "inside_a_step", 2, 5)]  # inside a step: not counted
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = as_trace(path)
    steps, _ = detect_steps(trace)
    sites = between_step_call_sites(trace, steps).set_index("call_site")
    # window 10..20: 12..14 and 16..18 in schedule, 14..16 in aten::select under it, 4 us with nothing
    assert sites.loc["vllm/v1/core/sched/scheduler.py(1): schedule", "host_us"] == pytest.approx(4.0)
    assert sites.loc["vllm/v1/core/sched/scheduler.py(1): schedule > aten::select", "host_us"] == pytest.approx(2.0)
    assert sites.loc["(no host activity recorded)", "host_us"] == pytest.approx(4.0)
    assert sites["share"].sum() == pytest.approx(1.0)
    assert not any("inside_a_step" in s for s in sites.index)


def test_a_gpu_trace_gets_no_host_only_ranking():
    an = Trace(DATA / "hta-critical-path-alexnet-a100.pt.trace.json.gz")
    assert an.host_call_sites() is None and an.to_json()["host_call_sites"] == []


def test_analyze_reads_vllms_cpu_trace_and_names_the_schedulers_placeholder_calls():
    an = Trace(BASELINE)
    assert not an.source()["has_device_events"]
    assert len(an.steps()) == 4 and an.step_detection()["source"] == "vllm execute_context"
    assert {"_model_forward", "_prepare_inputs"} <= set(an.step_phases()["phase"])
    top = an.host_call_sites().head(10)["call_site"].tolist()
    assert all(any(site in s for s in top) for site in PLACEHOLDER_SITES), top
    merged = Trace(MERGED).host_call_sites()["call_site"].tolist()
    assert not any(PLACEHOLDER_SITES[0] in s for s in merged)


def test_cli_says_host_only_and_lists_call_sites(tmp_path):
    out = subprocess.run([sys.executable, "-m", "labkit", "analyze", str(BASELINE), "--json", str(tmp_path / "a.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "no device events in this trace: host time only" in out.stdout
    assert "host call sites between steps" in out.stdout and "get_num_embeds" in out.stdout
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["host_call_sites"] and set(doc["host_call_sites"][0]) == {
        "call_site", "annotation", "python_frame", "cpu_op", "runtime", "host_us", "window_count", "share"}


def test_host_only_rows_set_the_prediction_beside_both_measured_runs():
    from labkit.trace.whatif.host_only import HostOnlyPrediction, host_only_rows

    p = HostOnlyPrediction(measured_step_ms=12.0, predicted_step_ms=11.0, arguments="--scale x=0", steps=5,
                           reads=None, replay_error=0.01)
    rows = host_only_rows(p, 10.5)
    assert [r["step_ms"] for r in rows] == [12.0, 11.0, 10.5]
    assert [r["source"] for r in rows] == ["measured-cpu", "simulated", "measured-cpu"]
    assert "--scale x=0" in rows[1]["run"]
    assert len(host_only_rows(p)) == 2
