"""Robust engine metrics, the profiler kept out of the measured window, and the recorded H200 data
(profile, traces, results) the idle-bubbles notebook compares the simulator with: their schema and
internal consistency, never their values (a re-recording must not break a test)."""

from types import SimpleNamespace

import pytest

from labkit.engine.config import EngineConfig
from labkit.engine.loop import EngineStep, summarize_run
from labkit.engine.recorded import engine_traces, sim_vs_measured, variant_of_run, with_robust_metrics
from labkit.results import REPO_ROOT

MS = 1_000_000


def _engine_with_outputs(output_ms, num_seqs=8):
    """A stand-in engine whose steps produced their tokens at ``output_ms`` (host ms)."""
    steps = [EngineStep(step=i, num_seqs=num_seqs, num_tokens=num_seqs, num_prefill=0, start_ns=0, schedule_ns=1,
                        prepare_ns=1, forward_ns=1, sample_ns=1, wait_ns=0, output_ns=int(t * MS), h2d_count=0)
             for i, t in enumerate(output_ms)]
    return SimpleNamespace(steps=steps, config=EngineConfig(), dev=SimpleNamespace(kind="torch"),
                           spec=SimpleNamespace(num_requests=8, images_per_request=2), graph_mode="none", graph_note="")


def test_one_stalled_step_moves_the_window_throughput_but_not_the_median_one():
    # warm-up output at 0 ms, then outputs 10, 20, 1020 (a 1 s stall), 1030 ms: 4 steps x 8 tokens
    row = summarize_run(_engine_with_outputs([-10, 0, 10, 20, 1020, 1030]), warmup_steps=2, measured_steps=4)
    assert row["median_ns"] == pytest.approx(10 * MS)
    assert row["tokens_per_step"] == 8
    assert row["tokens_per_s_median"] == pytest.approx(8 / 0.010)  # 800 tok/s
    assert row["tokens_per_s_window"] == pytest.approx(32 / 1.030)  # 31.07 tok/s
    assert row["max_ns"] == pytest.approx(1000 * MS)
    assert row["stall_ns"] == pytest.approx((1030 - 40) * MS)
    assert row["tpot_mean_ms"] == pytest.approx(1030 / 4)
    assert row["tpot_median_ms"] == pytest.approx(10.0)
    steady = summarize_run(_engine_with_outputs([-10, 0, 10, 20, 30, 40]), warmup_steps=2, measured_steps=4)
    assert steady["stall_ns"] == 0 and steady["tokens_per_s_window"] == pytest.approx(steady["tokens_per_s_median"])


class _StallingCapture:
    """A capture whose start and every step hold the (simulated) host for 5 s, like a profiler's first start."""

    def __init__(self, dev):
        self.dev, self.calls = dev, 0

    def _stall(self):
        self.calls += 1
        self.dev.launch("profiler_start", duration_ns=5_000_000_000)
        self.dev.synchronize()

    def __enter__(self):
        self._stall()
        return self

    def __exit__(self, *exc):
        return None

    def step(self):
        self._stall()


def test_profiler_start_never_enters_the_measured_window(monkeypatch, tmp_path):
    import labkit.engine.device.devices as devices
    import labkit.engine.device.sim_trace as sim_trace
    from labkit.engine.runs import run_variants

    made = []

    def fake_capture(dev, path, **kw):
        made.append(_StallingCapture(dev))
        return made[-1]

    def frozen_clock_device(kind, *, profile=None, **kw):
        # the host clock never moves: host time is only the modelled costs, so the run is the
        # same on a busy machine as on an idle one and only a profiler stall could move it
        assert kind == "sim"
        return devices.SimDevice(profile, clock=lambda: 0)

    monkeypatch.setattr(sim_trace, "device_capture", fake_capture)
    monkeypatch.setattr(devices, "make_device", frozen_clock_device)
    rows, _ = run_variants("sim", [("fast", "cursor", "none", True)], model="tiny", workload="pr40143",
                           num_requests=8, steps=4, warmup=2, trace_dir=str(tmp_path))
    assert made and made[0].calls >= 2  # the stalls did happen, after the measured run
    (row,) = rows
    assert row["window_ns"] < 1_000_000_000 and row["max_ns"] < 1_000_000_000  # a 5 s stall would be in both
    assert row["stall_ns"] < 0.5 * row["window_ns"]


def test_old_rows_get_robust_metrics_derived_from_their_own_fields():
    old = {"variant": "a/b/c/async", "batch_seqs": 128, "median_ns": 40 * MS, "steps": 8,
           "window_ns": 5000 * MS, "tokens_per_s": 204.8}
    (r,) = with_robust_metrics([old])
    assert r["tokens_per_s_median"] == pytest.approx(128 / 0.040)  # 3200 tok/s
    assert r["tokens_per_s_window"] == 204.8  # the recorded value, unchanged
    assert r["stall_ns"] == pytest.approx((5000 - 320) * MS)
    assert r["metrics_derived"] is True and "metrics_derived" not in old
    new = {"variant": "x", "tokens_per_s_median": 1.0, "tokens_per_s_window": 2.0}
    assert with_robust_metrics([new]) == [new]


def _engine_results():
    from labkit.results import ENGINE, ENGINE_SIM, find_all

    return find_all(ENGINE) + find_all(ENGINE_SIM)


@pytest.mark.parametrize("result", _engine_results(), ids=lambda r: f"{r.slug}-{r.name}")
def test_recorded_engine_rows_are_internally_consistent(result):
    """Schema and arithmetic of every recorded engine result; never its values."""
    assert result.source in ("measured-gpu", "measured-cpu", "simulated") and result.rows
    for r in with_robust_metrics(result.rows):
        assert r["source"] == result.source
        parts = r["variant"].split("/")
        assert parts[:3] == [r["placeholder"], r["scheduling"], r["prefix_ranges"]]
        mode = r.get("cudagraph", "none")  # graph-mode runs name their mode last
        assert parts[4:] == ([] if mode == "none" else [mode]) and parts[3] in ("async", "sync")
        assert 0 < r["p20_ns"] <= r["median_ns"] <= r["p80_ns"]
        # TPOT is the mean time between outputs over the measured window
        assert r["tpot_mean_ms"] == pytest.approx(r["window_ns"] / r["steps"] / 1e6, rel=1e-6)
        # throughput from the median step: one token per batch row
        per_step = r.get("tokens_per_step", r["batch_seqs"])
        assert r["tokens_per_s_median"] == pytest.approx(per_step / (r["median_ns"] / 1e9), rel=1e-6)
        assert r["stall_ns"] == pytest.approx(max(r["window_ns"] - r["steps"] * r["median_ns"], 0.0), abs=1.0)
        if r.get("device_idle_frac") is not None:
            assert 0.0 <= r["device_idle_frac"] <= 1.0


def test_engine_traces_map_run_folders_to_variants(tmp_path):
    assert variant_of_run("fast-cursor-per_layer-async") == "fast/cursor/per_layer/async"
    for variant, path in engine_traces("h200").items():  # whatever is recorded: named runs, real files
        assert len(variant.split("/")) == 4 and variant.split("/")[3] in ("async", "sync")
        assert path.is_file() and path.name.endswith(".pt.trace.json.gz")
    assert engine_traces("no-such-gpu") == {}
    run = tmp_path / "m" / "list-loop-none-async"
    run.mkdir(parents=True)
    (run / "w.1.pt.trace.json.gz").write_bytes(b"")
    (run / "w.2.pt.trace.json.gz").write_bytes(b"")
    assert engine_traces("m", root=tmp_path) == {"list/loop/none/async": run / "w.2.pt.trace.json.gz"}


def test_sim_vs_measured_ratios_by_hand():
    sim = [{"variant": "v", "batch_seqs": 4, "median_ns": 20 * MS, "steps": 2, "device_busy_ns": 12 * MS,
            "device_idle_frac": 0.7},
           {"variant": "only-sim", "batch_seqs": 4, "median_ns": 1 * MS}]
    measured = [{"variant": "v", "batch_seqs": 4, "median_ns": 10 * MS, "device_idle_frac": 0.5}]
    t = sim_vs_measured(sim, measured)
    assert list(t["variant"]) == ["v"]
    r = t.iloc[0]
    assert r["step_ratio"] == pytest.approx(2.0)
    assert r["simulated_busy_ms"] == pytest.approx(6.0) and r["busy_ratio"] is None
    assert r["measured_tok_s"] == pytest.approx(400.0) and r["simulated_tok_s"] == pytest.approx(200.0)
    assert r["measured_idle_frac"] == 0.5


def test_h200_profile_is_the_default_and_covers_every_layer_op():
    from labkit.engine.runs import default_profile_name
    from labkit.engine.model import LAYER_OPS
    from labkit.engine.device.profiles import load_profile

    assert default_profile_name() == "h200"
    p = load_profile("h200")
    assert not p.parametric and p.path and p.path.endswith("h200.json") and "H200" in p.origin
    # every layer op has a duration, and more tokens never take less time (schema and consistency only)
    for op in LAYER_OPS:
        kv = {"kv_tokens": 512} if op == "attention" else {}
        small = p.duration_ns(op, tokens=1, **kv)
        big = p.duration_ns(op, tokens=128, **({"kv_tokens": 128 * 512} if kv else {}))
        assert 0 < small <= big, op


def test_simulated_device_time_per_step_matches_the_h200_trace():
    # independent reference: the device busy time per profiled step in the recorded H200 trace
    from labkit.engine.device.devices import SimDevice
    from labkit.engine.loop import Engine
    from labkit.engine.device.profiles import load_profile
    from labkit.trace import Trace

    trace = engine_traces("h200")["fast/cursor/per_step/async"]
    measured_us = float(Trace(trace).steps()["device_busy_us"].median())
    dev = SimDevice(load_profile("h200"))
    eng = Engine(EngineConfig(model="gemma4-e4b-like", workload="pr40143", placeholder="fast", scheduling="cursor",
                              prefix_ranges="per_step"), dev)
    eng.run(3)
    simulated_us = dev.busy_ns / 3 / 1e3
    assert 0.75 < simulated_us / measured_us < 1.33, (simulated_us, measured_us)
    assert REPO_ROOT.joinpath("data", "profiles", "h200.json").is_file()


def test_host_cost_figures_come_from_the_recorded_files(tmp_path, monkeypatch):
    """Notebook 02's host-cost figures, from a results folder written here: the profile's charge per
    op, the op count of a 2-layer forward, the calibrated torch.add launch, the eager host forward
    range (per_layer and graph-mode rows left out) and the median busy time per traced step."""
    from types import SimpleNamespace

    import pandas as pd

    from labkit.engine.model import HEAD_OPS, LAYER_OPS, TAIL_OPS
    from labkit.engine.recorded import describe_host_cost, host_cost_figures
    from labkit.results import make_result, save_result

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    cal = make_result("calibration", [
        {"kind": "gpu", "variant": "launch_torch_add1", "metric": "device_ns", "median_ns": 9000.0},
        {"kind": "gpu", "variant": "launch_torch_add1", "metric": "host_ns", "median_ns": 7500.0},
    ], source="measured-gpu", machine={"slug": "h200", "device": "cuda"})
    save_result(cal, tmp_path)
    profile = SimpleNamespace(launch_overhead_ns=60_000.0, model="tiny")
    rows = [{"variant": "a/none", "host_forward_ns": 20e6}, {"variant": "b/none", "host_forward_ns": 26e6},
            {"variant": "x/per_layer/async", "host_forward_ns": 400e6},
            {"variant": "a/none", "cudagraph": "full", "host_forward_ns": 1e6}, {"variant": "c", "host_forward_ns": None}]
    an = {v: SimpleNamespace(steps=lambda b=b: pd.DataFrame({"device_busy_us": b})) for v, b in
          {"a": [9_000.0, 11_000.0], "b": [12_000.0], "c": [8_000.0, 8_000.0, 30_000.0]}.items()}
    fig = host_cost_figures(profile, rows, an)
    assert fig == {"host_per_op_us": 60.0, "ops_per_forward": len(HEAD_OPS) + 2 * len(LAYER_OPS) + len(TAIL_OPS),
                   "launch_add_us": 7.5, "host_forward_ms": (20.0, 26.0), "busy_per_step_ms": 10.0}
    text = describe_host_cost(fig)
    assert "60.0 us" in text and "7.5 us" in text and "20.0-26.0 ms" in text and "10.0 ms" in text
    # nothing recorded: every figure says so, none is made up
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "empty"))
    bare = host_cost_figures(SimpleNamespace(launch_overhead_ns=5_000.0, model=None), [], {})
    assert bare == {"host_per_op_us": 5.0, "ops_per_forward": None, "launch_add_us": None,
                    "host_forward_ms": None, "busy_per_step_ms": None}
    assert describe_host_cost(bare).count("not recorded") == 4
    assert "/ its op count, not recorded)" in describe_host_cost(bare)
    assert f"/ its {len(HEAD_OPS) + 2 * len(LAYER_OPS) + len(TAIL_OPS)} ops)" in text
