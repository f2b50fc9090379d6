"""``labkit whatif``: hand-worked replays, the self-check on real traces, and the A/B proof.

The hand-made traces below are small Kineto documents whose what-if answers are worked out by
hand in the comments; the A/B tests replay one engine run with the change that separates it
from another and compare with the other's measured median step.
"""

import gzip
import json
from pathlib import Path

import pytest
from real_traces import fixtures, shared

from labkit.cli import main
from labkit.errors import UsageError
from labkit.trace.whatif.predict import Change, parse_changes, predict
from labkit.trace.whatif.ab_pairs import AB_CASES, bubble_model_rows, lab_pairs, make_sim_pairs, predict_pair
from labkit.trace.whatif.dependency_graph import build_graph, records_from_trace
from labkit.trace.whatif.replay import replay

REPO = Path(__file__).resolve().parents[1]


def X(name, cat, ts, dur, *, pid=1, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def K(name, ts, dur, corr, cat="kernel", **args):
    return X(name, cat, ts, dur, pid=0, tid=7, device=0, stream=7, correlation=corr, **args)


def write_trace(path: Path, events, labkit=None) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "hand-made GPU"}], "traceEvents": events}
    if labkit is not None:
        doc["labkit"] = labkit
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def async_trace(tmp_path, *, steps=6, metadata=True):
    """Per step (300 us): schedule 290, launch a 150 us kernel, record an event, wait for the
    previous step's event (already done: the host is the bottleneck, device idle 50%)."""
    ev = []
    for n in range(steps):
        t = 300.0 * n
        ev += [X(f"ProfilerStep#{n}", "user_annotation", t, 300), X("schedule", "user_annotation", t, 290),
               X("cudaLaunchKernel", "cuda_runtime", t + 290, 5, correlation=10 * n + 1),
               K("k", t + 300, 150, 10 * n + 1),
               X("cudaEventRecord", "cuda_runtime", t + 295, 2, correlation=10 * n + 2),
               X("cudaEventSynchronize", "cuda_runtime", t + 297, 3, correlation=10 * n + 3)]
    return write_trace(tmp_path / "async.json.gz", ev, {"async_scheduling": True} if metadata else None)


def test_cheaper_schedule_makes_an_async_run_device_bound(tmp_path):
    w = predict(async_trace(tmp_path), [Change("scale", "^schedule$", 0.25)])
    # a step completes when its kernel has finished: 450 us after the first step's start, then every 300 us
    assert w.measured["step_ms"] == pytest.approx([0.45] + [0.3] * 5)
    assert w.replay_check["step_ms_error"] == 0.0 and w.replay_check["ok"]
    # by hand: schedule 72.5 us; the first kernel is ready at 82.5 us and ends at 232.5 us; each
    # later step waits for the previous step's kernel, so the 150 us kernels run back to back
    assert w.predicted["step_ms"] == pytest.approx([0.2325] + [0.150] * 5)
    assert w.predicted["step_ms_median"] == pytest.approx(0.150)
    # six 150 us kernels: in 1950 us measured, from 0 to 982.5 us predicted (idle only before the first)
    assert w.measured["device_idle_frac"] == pytest.approx(1 - 900 / 1950)
    assert w.predicted["device_idle_frac"] == pytest.approx(82.5 / 982.5)
    assert w.assumptions["event_sync_lag"] == 2
    assert w.gaps["closed_count"] == 5 and w.gaps["remaining_count"] == 0


def test_which_event_a_sync_waits_for_decides_the_overlap(tmp_path):
    """Per step (300 us): launch a 50 us kernel first, schedule for 290 us, record, wait: the kernel
    is done long before the wait, so the trace cannot tell which step's event it waited for."""
    def trace(name, labkit):
        ev = []
        for n in range(10):
            t = 300.0 * n
            ev += [X(f"ProfilerStep#{n}", "user_annotation", t, 300),
                   X("cudaLaunchKernel", "cuda_runtime", t, 5, correlation=10 * n + 1), K("k", t + 10, 50, 10 * n + 1),
                   X("schedule", "user_annotation", t + 5, 290),
                   X("cudaEventRecord", "cuda_runtime", t + 295, 2, correlation=10 * n + 2),
                   X("cudaEventSynchronize", "cuda_runtime", t + 297, 3, correlation=10 * n + 3)]
        return write_trace(tmp_path / name, ev, labkit)

    change = [Change("scale", "^schedule$", 0.1)]  # schedule 29 us: 39 us of host per step
    w1 = predict(trace("sync.json.gz", None), change)
    # no metadata, no waiting sync: the latest record; each step waits for its own kernel: 10 + 50 us
    assert w1.assumptions["event_sync_lag"] == 1 and "default" in w1.assumptions["event_sync_lag_from"]
    assert w1.predicted["step_ms_median"] == pytest.approx(0.060)
    w2 = predict(trace("async.json.gz", {"async_scheduling": True}), change)
    # the previous step's event: the host runs 39 us steps until it has to wait; the kernels run
    # back to back from 10 us on, so the steps complete at 60, 110, 160, ... us (the device's pace)
    assert w2.assumptions["event_sync_lag"] == 2
    assert w2.predicted["step_ms"] == pytest.approx([0.060] + [0.050] * 9)


def pageable_trace(tmp_path, steps=4):
    """Per step (400 us): launch a 200 us kernel, 50 us of prep, a pageable copy that waits for
    the kernel (returns 3 us after its 2 us copy), then 185 us of post-processing."""
    ev = []
    for n in range(steps):
        t = 400.0 * n
        ev += [X(f"ProfilerStep#{n}", "user_annotation", t, 400),
               X("cudaLaunchKernel", "cuda_runtime", t, 5, correlation=10 * n + 1), K("gemm", t + 10, 200, 10 * n + 1),
               X("prep", "cpu_op", t + 5, 50),
               X("aten::copy_", "cpu_op", t + 55, 160),
               X("cudaMemcpyAsync", "cuda_runtime", t + 55, 160, correlation=10 * n + 2),
               K("Memcpy HtoD (Pageable -> Device)", t + 210, 2, 10 * n + 2, cat="gpu_memcpy", bytes=64),
               X("post", "cpu_op", t + 215, 185)]
    return write_trace(tmp_path / "pageable.json.gz", ev)


def test_unsync_a_pageable_copy(tmp_path):
    path = pageable_trace(tmp_path)
    base = predict(path)
    assert base.predicted["step_ms_median"] == pytest.approx(0.4) and base.assumptions["synchronizing_calls"] == 4
    w = predict(path, parse_changes(unsync=["Pageable"]))
    # the copy call keeps only its own 3 us: 5 + 50 + 3 + 185 = 243 us per step, host-bound (device 202 us)
    assert w.predicted["step_ms"] == pytest.approx([0.243] * 4)
    # matched through the span around the call as well
    assert predict(path, parse_changes(unsync=["^aten::copy_$"])).predicted["step_ms_median"] == pytest.approx(0.243)
    # scaling the post-processing alone cannot pass the wait: 400 - 92.5
    w2 = predict(path, parse_changes(scale=["^post$=0.5"]))
    assert w2.predicted["step_ms_median"] == pytest.approx(0.3075)


def test_nested_spans_scale_once_and_changes_multiply(tmp_path):
    ev = [X("ProfilerStep#0", "user_annotation", 0, 100), X("outer", "python_function", 0, 100),
          X("outer", "python_function", 20, 40), X("inner", "cpu_op", 20, 40),
          X("ProfilerStep#1", "user_annotation", 100, 100)]
    path = write_trace(tmp_path / "host.json.gz", ev)
    w = predict(path, parse_changes(scale=["^outer$=0.5"]))
    assert w.predicted["step_ms"] == pytest.approx([0.05, 0.1])  # 0.5 x 100, not 0.5 x 60 + 0.25 x 40
    w = predict(path, parse_changes(scale=["^outer$=0.5", "inner=0.5"]))
    assert w.predicted["step_ms"][0] == pytest.approx(0.040)  # 0.5 x 60 + 0.25 x 40
    assert w.measured["device_idle_frac"] is None and any("host time only" in n for n in w.notes)


def test_graph_replay_moves_as_one_unit(tmp_path):
    # a 150 us kernel, then 90 us of host work, then a graph of three kernels (internal gaps 2 and 8 us)
    # that had to wait for the first kernel; the host work doubles, so the graph now waits for its launch
    ev = [X("ProfilerStep#0", "user_annotation", 0, 400),
          X("cudaLaunchKernel", "cuda_runtime", 0, 5, correlation=1), K("k0", 10, 150, 1),
          X("pre", "cpu_op", 5, 95),
          X("cudaGraphLaunch", "cuda_runtime", 100, 10, correlation=2),
          K("g1", 160, 30, 2), K("g2", 192, 30, 2), K("g3", 230, 20, 2),
          X("cudaDeviceSynchronize", "cuda_runtime", 200, 55, correlation=3)]
    rec = records_from_trace(__import__("labkit.trace.read.load", fromlist=["load_trace"]).load_trace(
        write_trace(tmp_path / "graph.json.gz", ev)))
    g = build_graph(rec)
    assert g.graph_units == 1
    base = replay(g)
    assert list(base.start) == [10, 160, 192, 230]
    rep = replay(g, [Change("scale", "^pre$", 2.0)])
    # the launch moves to 195; the graph's first kernel follows it after k0's 10 us launch latency,
    # the others keep their offsets (+32, +70): 205, 237, 275
    assert list(rep.start) == pytest.approx([10, 205, 237, 275])


def test_vllm_steps_give_tokens_per_second(tmp_path):
    ev = [X("execute_context_0(0)_generation_4(4)", "user_annotation", 0, 1000),
          X("execute_context_1(100)_generation_3(3)", "user_annotation", 1000, 1000),
          X("execute_context_0(0)_generation_4(4)", "user_annotation", 2000, 1000)]
    w = predict(write_trace(tmp_path / "vllm.json.gz", ev))
    assert w.steps["count"] == 3 and "execute" in w.steps["pattern"]
    assert w.measured["tokens_per_s"] == pytest.approx(4 / 1e-3)  # median tokens (4) / median step (1 ms)


LAB_TRACES = sorted((REPO / "data" / "traces").glob("*/*/*.pt.trace.json.gz"))
#: X-event categories that are not host work to replay (device ops, the profiler's own spans, markers)
NOT_HOST = {"kernel", "gpu_memcpy", "gpu_memset", "Trace", "ac2g", "overhead", "cpu_instant_event",
            "gpu_user_annotation", "cuda_sync"}


def _self_check_files():
    return fixtures() + LAB_TRACES + shared()


def _has_host_events(path: Path) -> bool:
    """Whether the raw JSON holds a complete host event (read with the standard library)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return any(e.get("ph") == "X" and e.get("cat") not in NOT_HOST for e in json.load(f)["traceEvents"])


@pytest.mark.parametrize("path", _self_check_files(), ids=lambda p: p.name[:60])
def test_unchanged_replay_reproduces_measured_steps(path):
    try:
        w = predict(path)
    except UsageError as exc:  # only a trimmed fixture without host events may be refused, saying so
        assert "no host events" in str(exc) and not _has_host_events(path), (path.name, str(exc))
        return
    assert w.replay_check["step_ms_error"] <= 0.02, (path.name, w.replay_check)
    assert w.predicted["step_ms_median"] == pytest.approx(w.measured["step_ms_median"], rel=0.02)
    assert w.steps["count"] >= 1 and w.measured["step_ms"], path.name


def test_every_trace_is_checked():
    """The self-check above covers every real-trace fixture, every recorded lab trace and (where
    present) every shared trace, and all but one of the fixtures have host work to replay."""
    checked = {p.resolve() for p in _self_check_files()}
    for folder, pattern in ((REPO / "tests" / "data", "*.pt.trace.json*"), (REPO / "data" / "traces", "**/*.pt.trace.json*")):
        assert {p.resolve() for p in folder.glob(pattern)} <= checked, folder
    assert len(LAB_TRACES) >= 7
    hostless = [p.name for p in fixtures() if not _has_host_events(p)]
    assert hostless == ["hta-trace-diff-control-a100-rank3.memcpy-only.pt.trace.json.gz"]


@pytest.fixture(scope="module")
def sim_pairs(tmp_path_factory):
    return make_sim_pairs(tmp_path_factory.mktemp("whatif_sim"))


@pytest.mark.parametrize("case", sorted(AB_CASES))
def test_sim_pairs_predicted_within_10_percent(sim_pairs, case):
    before, after = sim_pairs[case]
    row = predict_pair(before, after, case)
    assert row["source"] == "simulated"
    assert row["replay_check_before"] <= 0.02 and row["replay_check_after"] <= 0.02
    # the change matters: the second run is faster, and the prediction lands within 10% of it
    assert row["measured_after_step_ms"] < 0.9 * row["before_step_ms"]
    assert abs(row["error"]) <= 0.10, row


H200 = REPO / "data" / "traces" / "h200"


@pytest.mark.parametrize("case", sorted(AB_CASES))
def test_recorded_h200_pairs_predicted_within_10_percent(case):
    pairs = lab_pairs(H200)
    if case not in pairs:
        pytest.skip(f"H200 traces for {case} not recorded")
    row = predict_pair(*pairs[case], case)
    assert row["source"] == "measured-gpu" and "H200" in row["gpu"]
    assert abs(row["error"]) <= 0.10, row


def test_bubble_model_rows_carry_the_published_figures(sim_pairs):
    from labkit.mm.overlap import PR40143

    row = predict_pair(*sim_pairs["tensor->list"], "tensor->list")
    rows = bubble_model_rows(row)
    pub = {r["quantity"]: r["published"] for r in rows}
    assert pub["tpot_after_ms (async)"] == PR40143.mean_tpot_ms_after
    assert pub["tpot_after / tpot_before"] == pytest.approx(PR40143.mean_tpot_ms_after / PR40143.mean_tpot_ms_before)
    assert {r["model"] for r in rows} >= {"bubble model (published shape)"}


def test_cli_writes_json_and_html(tmp_path, capsys):
    path = async_trace(tmp_path)
    out, page = tmp_path / "w.json", tmp_path / "w.html"
    assert main(["whatif", str(path), "--scale", "^schedule$=0.25", "--json", str(out), "--html", str(page)]) == 0
    text = capsys.readouterr().out
    assert "self-check" in text and "predicted" in text
    data = json.loads(out.read_text())
    assert data["measured"]["step_ms_median"] == pytest.approx(0.3)
    assert data["predicted"]["step_ms_median"] == pytest.approx(0.15)
    assert set(data["measured"]) >= {"step_ms_median", "device_idle_frac"}
    assert data["changes"][0]["kind"] == "scale" and data["replay_check"]["step_ms_error"] == 0.0
    assert "<script" not in page.read_text() and "labkit whatif" in page.read_text()


@pytest.mark.parametrize("argv, needle", [
    (["--scale", "shedule=0.1"], "closest: 'schedule'"),
    (["--unsync", "Pageable"], "cudaEventSynchronize"),
    (["--scale", "schedule"], "NAME=FACTOR"),
    (["--scale", "schedule=-1"], ">= 0"),
    (["--scale", "sched(ule=0.5"], "not a valid regex"),
    (["--steps", "nothing_here"], "matches no host span"),
    (["--json", "/no/such/folder/out.json"], "does not exist"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, argv, needle):
    path = async_trace(tmp_path)
    out = tmp_path / "o.json"
    extra = [] if "--json" in argv else ["--json", str(out)]
    assert main(["whatif", str(path), *argv, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("labkit: error:") and needle in err[0], err
    assert not out.exists()


def test_missing_trace_is_a_usage_error(tmp_path, capsys):
    assert main(["whatif", str(tmp_path / "nope.json.gz")]) == 2
    assert "no such trace file" in capsys.readouterr().err
