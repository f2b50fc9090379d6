"""Timeline figures, the offline report, trace diffs, the notebook helpers and the big-trace builder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.trace import Trace
from labkit.trace.analysis.diff import diff_analyses
from labkit.trace.read.load import load_trace

DATA = Path(__file__).resolve().parent / "data"
GP100 = DATA / "hta-step-based-gpu-annotation-gp100.pt.trace.json.gz"
BERT = DATA / "tracelens-h100-bert-small-inference.pt.trace.json.gz"


def _sim_trace(tmp_path):
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 50},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 50, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 60, "dur": 1,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": 5,
         "args": {"stream": 7, "correlation": 1, "device": 0}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 62, "dur": 5,
         "args": {"stream": 7, "correlation": 2, "device": 0}},
    ]
    p = tmp_path / "sim.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": ev, "labkit": {"source": "simulated"},
                             "deviceProperties": [{"id": 0, "name": "simulated (profile: parametric)"}]}))
    return p


def test_simulated_source_and_timeline(tmp_path):
    pytest.importorskip("plotly")
    from labkit.viz.timeline import plot_idle_breakdown, plot_timeline, step_ranges

    an = Trace(_sim_trace(tmp_path))
    assert an.source()["simulated"] and an.source()["kind"] == "simulated"
    fig = plot_timeline(an)
    assert "SIMULATED" in fig.layout.title.text
    names = {t.name for t in fig.data}
    assert {"kernel", "idle: host wait", "runtime call"} <= names
    gap = next(t for t in fig.data if t.name == "idle: host wait")
    assert list(gap.base) == [pytest.approx(8 / 1e3)] and list(gap.x) == [pytest.approx(54 / 1e3)]
    labels = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert labels == ["whole trace", "ProfilerStep#0", "ProfilerStep#1"]
    # a step's range runs to the later of its host end and the end of the device work it launched
    assert step_ranges(an)[1][2] == pytest.approx(100 / 1e3)
    assert step_ranges(an)[0][2] == pytest.approx(50 / 1e3)
    assert "SIMULATED" in plot_idle_breakdown(an).layout.title.text
    # runs side by side: one bar per run and stream, each run's idle as its own analysis has it
    both = plot_idle_breakdown({"before": an, "after": an})
    host_wait = next(t for t in both.data if t.name == "host wait")
    assert len(host_wait.x) == 2 * len(an.idle()) and host_wait.x[0].startswith("before<br>GPU")
    assert list(host_wait.y) == [v / 1e3 for v in an.idle()["idle_host_wait_us"].tolist()] * 2


def test_timeline_caps_bars_and_pair():
    pytest.importorskip("plotly")
    from labkit.viz.timeline import plot_timeline, plot_timeline_pair

    an = Trace(BERT)
    fig = plot_timeline(an, max_events=100)
    assert sum(len(t.x) for t in fig.data) == 100
    assert "SIMULATED" not in fig.layout.title.text
    pair = plot_timeline_pair(an, Trace(GP100))
    axes = {t.yaxis for t in pair.data}
    assert axes == {"y", "y2"}


def test_diff_of_identical_and_different():
    a = Trace(GP100)
    same = diff_analyses(a, Trace(GP100))
    assert (same.totals["delta"] == 0).all()
    d = diff_analyses(a, Trace(BERT))
    t = d.totals.set_index("metric")
    assert t.loc["h2d_count", "before"] == 10 and t.loc["h2d_count", "after"] == 0
    assert t.loc["device_ops_count", "after"] == 61
    assert json.dumps(d.to_json(), allow_nan=False)


def test_build_big_trace_repeats_steps(tmp_path):
    from labkit.trace.analysis.bench_trace import build_big_trace
    from labkit.trace.analysis.device.bubbles import hta_idle_breakdown, hta_idle_totals

    info = build_big_trace(BERT, tmp_path / "big.json", size_mb=2.0)
    assert info["copies"] >= 2
    one, big = load_trace(BERT), load_trace(tmp_path / "big.json")
    assert len(big.events) == info["copies"] * len(one.events)
    steps = big.events[big.events["name"].astype(str).str.startswith("ProfilerStep#")]["name"].astype(str)
    assert steps.nunique() == info["copies"]  # one step name per copy (CPU and GPU annotation share it)
    assert big.events["correlation"][big.events["correlation"] >= 0].nunique() == \
        info["copies"] * one.events["correlation"][one.events["correlation"] >= 0].nunique()
    # copies do not overlap in time: lab idle per copy adds up, plus the gaps between copies
    an1, anb = Trace(one), Trace(big)
    assert anb.idle()["busy_us"].sum() == pytest.approx(info["copies"] * an1.idle()["busy_us"].sum(), rel=1e-6)
    assert len(hta_idle_totals(hta_idle_breakdown(big))) == 1


def test_lesson_trace_helpers():
    from labkit.viz.trace_notebook import PER_LAYER, analyses_sources, fixture_trace, missing_lab_traces

    p = fixture_trace("quick")
    assert p.name.startswith("hta-step-based") and p.is_file()
    full = fixture_trace("full")  # inside the project: no folder beside the checkout is needed
    assert full.is_file() and full.resolve().is_relative_to(Path(__file__).resolve().parents[1])
    with pytest.raises(ValueError):
        fixture_trace("huge")
    an = Trace(p)
    assert analyses_sources(an) == ["measured-gpu"]
    assert missing_lab_traces({}, variants=(PER_LAYER,), machine="nowhere").startswith("No recorded nowhere trace")
    assert missing_lab_traces({PER_LAYER: an}, variants=(PER_LAYER,)) == ""
