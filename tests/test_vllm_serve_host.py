"""The real server's per-step host beside the step: the probe, the steady window, the per-step costs.

Hand-made probe events with known increments; the probe itself on stand-in classes (no vLLM).
"""

from __future__ import annotations

import json
import threading

import pytest

from labkit.errors import UsageError
from labkit.vllm.server import host_probe
from labkit.vllm.server.serve_host import EDGE_STEPS, MIN_STEPS, analyze_point, decode_window, read_events


def _steps(n_req: int, steady: int, *, out_step_ns: int = 100_000, in_step_ns: int = 0, before: int = 3):
    """``before`` prefill steps, then ``steady`` decode steps of 10 ms each with every request running."""
    ev, t, out_cpu, in_cpu = [], 100.0, 5_000_000, 9_000_000
    for i in range(before):
        ev.append({"event": "step", "t0": t, "t": t + 0.05, "running": n_req, "waiting": 0, "prefilling": 1,
                   "out_cpu_ns": out_cpu, "in_cpu_ns": in_cpu})
        t += 0.05
    for i in range(steady):
        out_cpu += out_step_ns
        in_cpu += in_step_ns
        ev.append({"event": "step", "t0": t, "t": t + 0.01, "running": n_req, "waiting": 0, "prefilling": 0,
                   "out_cpu_ns": out_cpu, "in_cpu_ns": in_cpu})
        t += 0.01
    return ev


def _outputs(steps, n_req: int, *, api_step_ns: int = 2_000_000, call_ns: int = 500_000):
    ev, cpu = [], 1_000_000_000
    for s in steps:
        cpu += api_step_ns
        ev.append({"event": "outputs", "t": s["t"] + 0.001, "outputs": n_req, "call_cpu_ns": call_ns,
                   "proc_cpu_ns": cpu})
    return ev


def test_the_window_is_the_longest_steady_run_less_its_edges():
    ev = _steps(4, 30)
    # a second, shorter steady run after a step with one waiting
    ev.append({"event": "step", "t0": 200.0, "t": 200.1, "running": 4, "waiting": 1, "prefilling": 0})
    ev += [{"event": "step", "t0": 201.0 + i, "t": 201.5 + i, "running": 4, "waiting": 0, "prefilling": 0}
           for i in range(12)]
    w = decode_window(ev, 4)
    assert len(w) == 30 - 2 * EDGE_STEPS
    assert w[0]["t0"] == pytest.approx(100.0 + 3 * 0.05 + EDGE_STEPS * 0.01)


def test_too_short_a_steady_run_is_refused():
    with pytest.raises(UsageError, match="steady decode steps"):
        decode_window(_steps(4, 2 * EDGE_STEPS + MIN_STEPS - 1), 4)
    with pytest.raises(UsageError):
        decode_window(_steps(4, 40), 8)  # never 8 running


def test_per_step_costs_from_cumulative_clocks():
    steps = _steps(4, 40, out_step_ns=120_000, in_step_ns=30_000)
    # the API server: 2 ms of process CPU per step, its output processor 0.5 ms; an extra batch of 1
    # output (a request's first token elsewhere) inside the window does not count
    outs = _outputs(steps[3:], 4)
    outs.insert(20, {"event": "outputs", "t": outs[19]["t"] + 0.0005, "outputs": 1, "call_cpu_ns": 7,
                     "proc_cpu_ns": outs[19]["proc_cpu_ns"]})
    # the client: 0.3 ms of CPU per 10 ms step, sampled every 50 ms
    t0 = steps[0]["t0"]
    client = [(t0 + 0.05 * i, 0.03 * 1e9 * 0.05 * i) for i in range(40)]
    rows, summary = analyze_point(sorted(steps + outs, key=lambda e: e["t"]), 4, client)
    got = {r["phase"]: r for r in rows}
    assert got["engine_output_thread"]["median_ns"] == pytest.approx(120_000)
    assert got["engine_input_thread"]["median_ns"] == pytest.approx(30_000)
    assert got["api_server_outputs"]["median_ns"] == pytest.approx(2_000_000)
    assert got["api_output_processor"]["median_ns"] == pytest.approx(500_000)
    assert got["client"]["mean_ns"] == pytest.approx(300_000, rel=1e-6)
    assert summary["window_steps"] == 40 - 2 * EDGE_STEPS
    assert summary["step_median_ms"] == pytest.approx(10.0)


def test_no_api_outputs_in_the_window_is_refused():
    steps = _steps(4, 40)
    with pytest.raises(UsageError, match="output batches"):
        analyze_point(steps, 4)
    with pytest.raises(UsageError, match="no engine step"):
        analyze_point(_outputs(steps, 4), 4)


def test_read_events_refuses_foreign_lines(tmp_path):
    (tmp_path / "serve-host-1.jsonl").write_text(json.dumps({"event": "step", "t": 2.0}) + "\n")
    (tmp_path / "serve-host-2.jsonl").write_text(json.dumps({"event": "outputs", "t": 1.0}) + "\n")
    assert [e["t"] for e in read_events(tmp_path)] == [1.0, 2.0]
    (tmp_path / "serve-host-3.jsonl").write_text('{"event": "api_entry", "t": 3}\n')
    with pytest.raises(UsageError, match="not a serve-host probe event"):
        read_events(tmp_path)


class _Req:
    def __init__(self, computed, prompt):
        self.num_computed_tokens, self.num_prompt_tokens = computed, prompt


class _Core:
    """Stands in for vLLM's EngineCoreProc: a scheduler's queues and an output thread."""

    def __init__(self, thread):
        self.scheduler = type("S", (), {})()
        self.scheduler.running = [_Req(10, 10), _Req(3, 10)]
        self.scheduler.waiting = [object()]
        self.output_thread = thread

    def _process_engine_step(self):
        self.scheduler.running.append(_Req(0, 5))
        return True


def test_the_step_probe_logs_counts_before_the_step_and_the_output_threads_clock(tmp_path):
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            sum(range(1000))

    th = threading.Thread(target=busy, daemon=True)
    th.start()
    try:
        log = host_probe._Log(tmp_path)
        assert host_probe._wrap_step(_Core, log)
        assert not host_probe._wrap_step(_Core, log)  # wrapped once
        core = _Core(th)
        assert core._process_engine_step() is True
        assert core._process_engine_step() is True
    finally:
        stop.set()
        th.join()
    ev = read_events(tmp_path)
    assert [(e["running"], e["waiting"], e["prefilling"]) for e in ev] == [(2, 1, 1), (3, 1, 2)]
    assert ev[0]["t0"] <= ev[0]["t"] <= ev[1]["t0"]
    assert ev[1]["out_cpu_ns"] >= ev[0]["out_cpu_ns"] > 0
    assert ev[0]["in_cpu_ns"] is None  # no input thread here


def test_the_outputs_probe_passes_the_call_through(tmp_path):
    class Proc:
        def process_outputs(self, outs, stamp=None):
            return ("done", len(outs), stamp)

    log = host_probe._Log(tmp_path)
    assert host_probe._wrap_outputs(Proc, log)
    assert Proc().process_outputs([1, 2, 3], stamp=7) == ("done", 3, 7)
    (ev,) = read_events(tmp_path)
    assert ev["outputs"] == 3 and ev["call_cpu_ns"] >= 0 and ev["proc_cpu_ns"] > 0


def test_thread_cpu_of_a_finished_thread_is_none():
    th = threading.Thread(target=lambda: None)
    th.start()
    th.join()
    assert host_probe.thread_cpu_ns(th) is None and host_probe.thread_cpu_ns(None) is None


def test_no_folder_no_probe(monkeypatch):
    monkeypatch.delenv(host_probe.ENV_VAR, raising=False)
    assert host_probe.install_probe() == []


@pytest.mark.parametrize("argv", [["--points", "0"], ["--points", "a,b"], ["--output-len", "5"]])
def test_cli_bad_input_one_line_exit_2(argv, capsys):
    from labkit.vllm.server.serve_host import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]


def test_make_model_vocab_size_checks():
    from labkit.vllm.conformance.models import make_model

    with pytest.raises(UsageError, match="gemma4"):
        make_model("pixtral-llava", "/nonexistent/x", vocab_size=262144)
    with pytest.raises(UsageError, match="--vocab-size must be"):
        make_model("gemma4", "/nonexistent/x", vocab_size=10)
