"""``labkit whatif``: hand-worked replays, the self-check on real traces, and the A/B proof.

The hand-made traces below are small Kineto documents whose what-if answers are worked out by
hand in the comments; the A/B tests replay one engine run with the change that separates it
from another and compare with the other's measured median step.
"""

import gzip
import json
import shlex
from pathlib import Path

import pytest
from real_traces import fixtures, shared
from whatif_traces import K, X, write_trace

from labkit.cli import main
from labkit.errors import UsageError
from labkit.trace import Trace
from labkit.trace.read.load import as_trace, load_trace
from labkit.trace.whatif.predict import Change, parse_changes, predict
from labkit.trace.analysis.host.steps import find_step_spans
from whatif_pairs import SIM_CASES, derive_changes, make_sim_pairs, predict_pair, sim_case_name
from labkit.trace.whatif.dependency_graph import build_graph, records_from_trace
from labkit.trace.whatif.replay import replay

REPO = Path(__file__).resolve().parents[1]


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
    # idle from the first step's completion on: measured 450 -> 1950 us holds five 150 us kernels
    # (half idle); predicted 232.5 -> 982.5 us holds the same five back to back (never idle)
    assert w.measured["device_idle_frac"] == pytest.approx(0.5)
    assert w.predicted["device_idle_frac"] == pytest.approx(0.0)
    assert w.measured["window_ms"] == pytest.approx(1.5) and w.predicted["window_ms"] == pytest.approx(0.75)
    assert w.assumptions["event_sync_lag"] == 2
    assert w.gaps["closed_count"] == 5 and w.gaps["remaining_count"] == 0


def test_a_trace_read_once_serves_the_analysis_and_the_replay(tmp_path):
    """``predict`` takes a ``Trace``: the replay uses the tables it already read, with the hand-worked
    answer of the test above."""
    t = Trace(async_trace(tmp_path))
    assert as_trace(t) is t.tables
    w = predict(t, [Change("scale", "^schedule$", 0.25)])
    assert w.predicted["step_ms"] == pytest.approx([0.2325] + [0.150] * 5)
    assert len(t.steps()) == 6  # the same object still answers the analysis


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
    rec = records_from_trace(load_trace(write_trace(tmp_path / "graph.json.gz", ev)))
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


def _second_run(after: Path):
    """The second run's measured figures: read only to compare with a prediction."""
    return predict(after)


@pytest.mark.parametrize("case", [sim_case_name(c, m) for c, m in SIM_CASES])
def test_sim_pairs_predicted_from_the_first_run(sim_pairs, case, tmp_path):
    """One simulated run plus the change that separates it from the other (derived from the first
    run's trace, the calibration and the ledger) lands within 10% of the other run's median step
    and within 0.05 of its device idle fraction: host-bound eager pairs, and pairs under CUDA
    graphs where host and device overlap (``tensor->list/full`` ends device-bound)."""
    before, after = sim_pairs[case]
    hidden = tmp_path / "second-run-put-away"
    after.rename(hidden)  # the derivation cannot read the second run: it is not there
    try:
        changes, how = derive_changes(case, before)
    finally:
        hidden.rename(after)
    w = predict(before, changes)
    m = _second_run(after)
    assert w.source["kind"] == "simulated"
    assert w.replay_check["ok"] and m.replay_check["ok"]
    assert m.measured["step_ms_median"] < 0.9 * w.measured["step_ms_median"]  # the change matters
    assert w.predicted["step_ms_median"] == pytest.approx(m.measured["step_ms_median"], rel=0.10), (changes, how)
    assert w.predicted["device_idle_frac"] == pytest.approx(m.measured["device_idle_frac"], abs=0.05), (changes, how)
    if case.startswith("tensor->list"):
        # the loop scheduler reads every image of every request each decode step: 16 x 32
        assert how["reads_per_step"] == 16 * 32 and changes[0].kind == "scale"
    else:
        # per_layer copies each row (16) and the nested offsets on each of the tiny model's 2 layers,
        # per_step none inside the layers: every such copy of the 4 profiled steps goes
        assert changes == [Change("drop_copies", r"^forward/layer_\d+$", keep=0)]
        assert w.assumptions["dropped_copies"] == 4 * 2 * (16 + 1)


def test_pair_rows_put_prediction_and_measurement_side_by_side(sim_pairs):
    row = predict_pair(*sim_pairs["tensor->list"], "tensor->list")
    w, m = predict(sim_pairs["tensor->list"][0], derive_changes("tensor->list", sim_pairs["tensor->list"][0])[0]), \
        _second_run(sim_pairs["tensor->list"][1])
    assert row["predicted_after_step_ms"] == w.predicted["step_ms_median"]
    assert row["measured_after_step_ms"] == m.measured["step_ms_median"]
    assert row["idle_error"] == pytest.approx(w.predicted["device_idle_frac"] - m.measured["device_idle_frac"])
    assert row["change"] == f"--scale '^schedule$={row['scale_factor']:.4g}'"


def _four_copies(n: int, t: float) -> list:
    """Four small pageable copies inside a layer starting at ``t``: a call every 100 us from 10 us,
    each 10 us long around its 2 us copy (6 us of own cost, 4 us of wait)."""
    ev = []
    for k in range(4):
        c = 100 * n + 10 * k + 1
        ev += [X("cudaMemcpyAsync", "cuda_runtime", t + 100 * k + 10, 10, correlation=c),
               K("Memcpy HtoD (Pageable -> Device)", t + 100 * k + 12, 2, c, cat="gpu_memcpy", bytes=64)]
    return ev


def copies_trace(tmp_path, steps=4):
    """Per step (1000 us): an annotation ``layer_0`` [0, 500] making 4 small pageable copies
    (``_four_copies``), then a 300 us kernel launched at 450 us, then 500 us of post-processing."""
    ev = []
    for n in range(steps):
        t = 1000.0 * n
        ev += [X(f"ProfilerStep#{n}", "user_annotation", t, 1000), X("layer_0", "user_annotation", t, 500)]
        ev += _four_copies(n, t)
        ev += [X("cudaLaunchKernel", "cuda_runtime", t + 450, 5, correlation=100 * n + 50), K("k", t + 460, 300, 100 * n + 50),
               X("post", "cpu_op", t + 500, 500)]
    return write_trace(tmp_path / "copies.json.gz", ev)


def test_drop_copies_removes_their_host_work_waits_and_device_ops(tmp_path):
    path = copies_trace(tmp_path)
    w = predict(path, parse_changes(drop_copies=[r"^layer_\d+$"]))
    # per copy: 300 us between the first and the last call, less 3 x 4 us of waits, over 3 copies
    assert w.assumptions["per_copy_host_us"] == {r"^layer_\d+$": pytest.approx(96.0)}
    assert w.assumptions["dropped_copies"] == 16 and w.changes[0]["matched"] == 16
    # the layer's 484 us of host work loses 4 x 96: 100 us are left, then 500 us of post: 600 us a step
    assert w.predicted["step_ms"] == pytest.approx([0.6] * 4)
    # steady steps: measured 1000 us with 300 + 8 us busy, predicted 600 us with the kernel alone
    assert w.measured["device_idle_frac"] == pytest.approx(1 - 308 / 1000)
    assert w.predicted["device_idle_frac"] == pytest.approx(0.5)
    assert w.predicted["streams"][0]["ops_count"] == 4  # the copies are gone from the stream
    rec = records_from_trace(load_trace(path))
    g = build_graph(rec)
    rep = replay(g, parse_changes(drop_copies=[r"^layer_\d+$"]), find_step_spans(rec)[0])
    copies = [i for i, o in enumerate(rec.ops) if o.cat == "gpu_memcpy"]
    assert len(copies) == 16 and all(rep.end[i] == rep.start[i] for i in copies)  # zero length where they were
    keep = predict(path, parse_changes(drop_copies=[r"^layer_\d+$=1"]))
    # one copy kept a step: 288 us of the layer go (3 copies), about 100 us more a step than above
    # (the kept copy's own 6 us shrink with the span, which is scaled as a whole)
    assert keep.assumptions["dropped_copies"] == 12
    assert 0.69 < keep.predicted["step_ms_median"] < 0.71


def padded_copies_trace(tmp_path, steps=4):
    """Per step (1000 us), the pre-#38794 build: ``layer_0`` [0, 700] makes the 4 copies of
    ``_four_copies`` (calls at 10, 110, 210, 310 us), then the nested pad ``aten::to_padded_tensor``
    [400, 460] launches a 5 us kernel (call [420, 425]), the build returns, and the layer's own
    ``rms`` [520, 540] launches a 300 us kernel (call [525, 530]); then 300 us of post-processing."""
    ev = []
    for n in range(steps):
        t = 1000.0 * n
        ev += [X(f"ProfilerStep#{n}", "user_annotation", t, 1000), X("layer_0", "user_annotation", t, 700)]
        ev += _four_copies(n, t)
        ev += [X("aten::to_padded_tensor", "cpu_op", t + 400, 60),
               X("cudaLaunchKernel", "cuda_runtime", t + 420, 5, correlation=100 * n + 60), K("pad", t + 430, 5, 100 * n + 60),
               X("rms", "cpu_op", t + 520, 20),
               X("cudaLaunchKernel", "cuda_runtime", t + 525, 5, correlation=100 * n + 70), K("k", t + 535, 300, 100 * n + 70),
               X("post", "cpu_op", t + 700, 300)]
    return write_trace(tmp_path / "padded.json.gz", ev)


def test_drop_copies_takes_the_nested_pad_of_a_build_whose_copies_all_go(tmp_path):
    path = padded_copies_trace(tmp_path)
    w = predict(path, parse_changes(drop_copies=[r"^layer_\d+$"]))
    # the copies: 4 x 96 us (as in copies_trace); the pad: from the last copy call's end (320 us) to
    # the layer's next call (rms, 520 us), no waits in it: 200 us. The layer's 700 - 16 us of host
    # work keep 100 us, compressed alike, so rms launches at 100 x 509 / 684 us, its kernel 10 us
    # later (the launch latency it had) and ends 300 us on; the host ends the layer at 100 us and
    # the step at 400 us, after the kernel: 400 us a step
    assert w.assumptions["pad_host_us"] == {r"^layer_\d+$": pytest.approx(200.0)}
    assert w.assumptions["dropped_copies"] == 16 and w.assumptions["dropped_build_ops"] == 4  # the pad kernels
    assert w.predicted["step_ms"] == pytest.approx([0.4] * 4)
    # steady window: measured 3000 us with 3 x (8 + 5 + 300) us busy; predicted 1200 us with 3 x 300
    assert w.measured["device_idle_frac"] == pytest.approx(1 - 3 * 313 / 3000)
    assert w.predicted["device_idle_frac"] == pytest.approx(0.25)
    assert w.predicted["streams"][0]["ops_count"] == 4  # the layer's own kernels stay
    # one copy kept a step: the build still runs in that layer (pad, its kernel and its 200 us stay)
    keep = predict(path, parse_changes(drop_copies=[r"^layer_\d+$=1"]))
    assert keep.assumptions["dropped_copies"] == 12 and keep.assumptions["dropped_build_ops"] == 0
    assert keep.assumptions["pad_host_us"] == {r"^layer_\d+$": 0.0}


def two_waits_trace(tmp_path, steps=4):
    """Per step (400 us): a 200 us kernel launched at 0; ``busy_work`` [20, 50] while it runs; a
    ``cudaStreamSynchronize`` [55, 213] that waits for it (returns 3 us after its end); a
    ``cudaDeviceSynchronize`` [213, 216] that finds the device drained; ``post`` [216, 400]."""
    ev = []
    for n in range(steps):
        t = 400.0 * n
        ev += [X(f"ProfilerStep#{n}", "user_annotation", t, 400),
               X("cudaLaunchKernel", "cuda_runtime", t, 5, correlation=10 * n + 1), K("gemm", t + 10, 200, 10 * n + 1),
               X("busy_work", "cpu_op", t + 20, 30),
               X("cudaStreamSynchronize", "cuda_runtime", t + 55, 158, correlation=10 * n + 2),
               X("cudaDeviceSynchronize", "cuda_runtime", t + 213, 3, correlation=10 * n + 3),
               X("post", "cpu_op", t + 216, 184)]
    return write_trace(tmp_path / "two_waits.json.gz", ev)


def test_changes_that_do_not_matter_say_so_on_stderr_and_in_the_json(tmp_path, capsys):
    path, out = two_waits_trace(tmp_path), tmp_path / "w.json"
    # the device sync never waited: with it non-blocking, the stream sync still holds every step
    assert main(["whatif", str(path), "--unsync", "cudaDeviceSynchronize", "--json", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("labkit: warning: --unsync 'cudaDeviceSynchronize' matches 4 ")
    assert "'cudaStreamSynchronize' (4 calls" in err[0]
    doc = json.loads(out.read_text())
    assert doc["changes"][0]["warning"] == err[0].removeprefix("labkit: warning: ")
    assert doc["predicted"]["step_ms_median"] == pytest.approx(0.4)
    # busy_work runs while the kernel does: it overlaps no device idle
    assert main(["whatif", str(path), "--scale", "^busy_work$=0", "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert "--scale '^busy_work$' matches 4 host spans, none of which overlaps device idle" in err
    assert json.loads(out.read_text())["changes"][0]["idle_overlap_us"] == 0.0
    # a change that matters says nothing: post overlaps the idle after each kernel
    assert main(["whatif", str(path), "--scale", "^post$=0.5", "--unsync", "cudaStreamSynchronize"]) == 0
    assert capsys.readouterr().err == ""


def test_suggest_ranks_spans_sync_sites_and_copies_by_hand(tmp_path, capsys):
    w = predict(pageable_trace(tmp_path), suggest=True)
    s = w.suggestions
    assert s["base_step_ms"] == pytest.approx(0.4)
    # device idle [212, 410] us each step (the last to the 1600 us end): post [215, 400] overlaps 185 us
    # of it, prep [5, 55] 5 us (the first step's [0, 10] and the idle before each later kernel), the
    # copy's span [55, 215] 3 us
    assert [(x["pattern"], x["count"]) for x in s["spans"]] == [("^post$", 4), ("^prep$", 4), (r"^aten::copy_$", 4)]
    assert [x["idle_overlap_ms"] for x in s["spans"]] == pytest.approx([0.740, 0.020, 0.012])
    # removed: post -> host 5 + 50 + the copy's wait to 215 us; copy_ (and its wait) -> 5 + 50 + 185
    assert [x["predicted_step_ms"] for x in s["spans"]] == pytest.approx([0.215, 0.4, 0.240])
    assert s["spans"][2]["argument"] == "--scale '^aten::copy_$=0' --unsync '^aten::copy_$'"
    # the copy waited 160 - 3 us a step; non-blocking: 5 + 50 + 3 + 185 (test_unsync_a_pageable_copy)
    assert [(x["pattern"], x["calls"]) for x in s["syncs"]] == [(r"^aten::copy_$", ["cudaMemcpyAsync"])]
    assert s["syncs"][0]["waited_ms"] == pytest.approx(0.628) and s["syncs"][0]["predicted_step_ms"] == pytest.approx(0.243)
    assert s["copies"] == []  # one copy a step: not the repeated-copies pattern
    c = predict(copies_trace(tmp_path), suggest=True).suggestions["copies"]
    assert [(x["pattern"], x["per_step"], x["argument"]) for x in c] == [(r"^layer_\d+$", 4, r"--drop-copies '^layer_\d+$=0'")]
    assert c[0]["predicted_step_ms"] == pytest.approx(0.6)
    # every suggested argument, given to labkit whatif, predicts what the suggestion says
    assert main(["whatif", str(pageable_trace(tmp_path)), *shlex.split(s["spans"][2]["argument"])]) == 0
    assert f"{s['spans'][2]['predicted_step_ms']:.3f}" in capsys.readouterr().out.split("step ms (median)")[1].split()[1]


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
    (["--drop-copies", "schedule"], "matches no host span with pageable host-to-device copies"),
    (["--drop-copies", "schedule=-1"], "KEEP must be a whole number"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, argv, needle):
    path = async_trace(tmp_path)
    out = tmp_path / "o.json"
    extra = [] if "--json" in argv else ["--json", str(out)]
    assert main(["whatif", str(path), *argv, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("labkit whatif: error:") and needle in err[0], err
    assert not out.exists()


def test_missing_trace_is_a_usage_error(tmp_path, capsys):
    assert main(["whatif", str(tmp_path / "nope.json.gz")]) == 2
    assert "no such trace file" in capsys.readouterr().err
