"""scripts/trim_trace.py: a hand-worked trace, a recorded H200 trace, and the command's bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from labkit.errors import UsageError
from labkit.trace.read.load import load_trace
from scripts.trim_trace import main as trim_main
from scripts.trim_trace import step_starts, trim_events, trim_trace

ROOT = Path(__file__).resolve().parents[1]
H200_TRACE = next(iter(sorted((ROOT / "data" / "traces" / "h200" / "tensor-loop-none-async").glob("*.pt.trace.json.gz"))), None)


def _hand_trace() -> list[dict]:
    # Three host steps starting at 100, 200, 300 us; what a 1-step and a 2-step trim keep is
    # worked out by hand in the names: k1 = kept with steps=1, k2 = kept with steps=2 only.
    return [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "host"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 100, "dur": 50},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#8", "ts": 200, "dur": 50},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#9", "ts": 300, "dur": 50},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#7", "ts": 90, "dur": 30},  # device lane: not a window start
        {"ph": "X", "cat": "kernel", "name": "k1-after-host-range", "ts": 160, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "k2-in-step-8", "ts": 210, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "dropped-in-step-9", "ts": 305, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "dropped-before-first-step", "ts": 50, "dur": 5},
        {"ph": "s", "cat": "ac2g", "id": 7, "name": "k1-flow-start", "ts": 120},
        {"ph": "f", "cat": "ac2g", "id": 7, "name": "k1-flow-end", "ts": 130},
        {"ph": "s", "cat": "ac2g", "id": 8, "name": "k2-flow-start-half-out", "ts": 150},
        {"ph": "f", "cat": "ac2g", "id": 8, "name": "k2-flow-end", "ts": 220},
        {"ph": "i", "name": "k1-no-timestamp"},
    ]


def _names(events):
    return [e["name"] for e in events]


def test_step_starts_are_host_profiler_steps_only():
    assert step_starts(_hand_trace()) == [100.0, 200.0, 300.0]


def test_one_step_keeps_the_first_window_and_whole_flows():
    kept, stats = trim_events(_hand_trace(), steps=1)
    assert _names(kept) == [
        "process_name", "ProfilerStep#7", "k1-after-host-range", "k1-flow-start", "k1-flow-end", "k1-no-timestamp",
    ]
    assert (stats.events_in, stats.events_out, stats.steps_in, stats.steps_kept) == (14, 6, 3, 1)
    assert (stats.window_start_us, stats.window_end_us) == (100.0, 200.0)


def test_two_steps_keep_the_second_window_and_the_flow_across_it():
    kept, stats = trim_events(_hand_trace(), steps=2)
    names = _names(kept)
    assert "k2-in-step-8" in names and "k2-flow-start-half-out" in names and "k2-flow-end" in names
    assert "dropped-in-step-9" not in names and "dropped-before-first-step" not in names
    assert stats.window_end_us == 300.0


def test_more_steps_than_recorded_keeps_to_the_end():
    kept, stats = trim_events(_hand_trace(), steps=5)
    assert "dropped-in-step-9" in _names(kept)
    assert stats.steps_kept == 3 and stats.window_end_us == float("inf")


def test_no_profiler_steps_means_no_trim_and_bad_steps_raise():
    events = [e for e in _hand_trace() if not e["name"].startswith("ProfilerStep")]
    assert trim_events(events, steps=1) is None
    with pytest.raises(UsageError):
        trim_events(_hand_trace(), steps=0)


@pytest.mark.skipif(H200_TRACE is None, reason="no recorded H200 trace in data/traces/h200")
def test_recorded_h200_trace_trims_to_one_loadable_step(tmp_path):
    dst = tmp_path / "one.pt.trace.json.gz"
    stats = trim_trace(H200_TRACE, dst, steps=1)
    src_doc = json.loads(gzip.decompress(H200_TRACE.read_bytes()))
    out_doc = json.loads(gzip.decompress(dst.read_bytes()))
    # top-level fields and metadata survive; exactly one host step remains
    assert set(out_doc) == set(src_doc)
    assert out_doc["deviceProperties"] == src_doc["deviceProperties"]
    meta = [e for e in src_doc["traceEvents"] if e.get("ph") == "M"]
    assert [e for e in out_doc["traceEvents"] if e.get("ph") == "M"] == meta
    host_steps = [e for e in out_doc["traceEvents"] if e.get("cat") == "user_annotation"
                  and str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(host_steps) == 1 and stats.steps_in == 2
    assert 0 < stats.events_out < stats.events_in == len(src_doc["traceEvents"])
    assert dst.stat().st_size < H200_TRACE.stat().st_size
    # every complete event kept starts inside the window, and the lab's own loader reads each of
    # them (kernels too: the device work launched in the step stays with it)
    kept = [e for e in out_doc["traceEvents"] if e.get("ph") == "X"]
    assert kept and all(stats.window_start_us <= e["ts"] < stats.window_end_us for e in kept)
    src_in_window = [e for e in src_doc["traceEvents"] if e.get("ph") == "X"
                     and stats.window_start_us <= e["ts"] < stats.window_end_us]
    assert kept == src_in_window  # unmodified, in file order
    trace = load_trace(dst)
    kernels = [e for e in kept if e.get("cat") == "kernel"]
    assert len(trace.events) == len(kept) and len(kernels) > 0
    assert int((trace.events["cat"] == "kernel").sum()) == len(kernels)


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert trim_main([str(tmp_path / "missing.json"), str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert trim_main([str(bad), str(tmp_path / "o.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "o.json").exists()


def test_cli_without_steps_exits_1_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "plain.json"
    src.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}]}))
    assert trim_main([str(src), str(tmp_path / "o.json")]) == 1 and not (tmp_path / "o.json").exists()
