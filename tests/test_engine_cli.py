"""``labkit bench engine`` end to end on the simulated device, figures and the widget callback."""

import json

import pytest

from labkit.cli import main


def test_bench_engine_writes_results_and_traces(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    rc = main(["bench", "engine", "--device", "sim", "--model", "tiny", "--num-requests", "16", "--steps", "2",
               "--warmup", "1", "--placeholders", "tensor,fast", "--scheduling", "loop",
               "--prefix-ranges", "none", "--trace-dir", str(tmp_path / "tr"), "--json", str(tmp_path / "e.json"),
               "--profile", "parametric"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "tensor/loop/none/async" in out and "simulated" in out
    data = json.loads((tmp_path / "e.json").read_text())
    assert data["source"] == "simulated" and data["params"]["profile_parametric"] is True
    assert data["complete"] is True
    assert [r["variant"] for r in data["rows"]] == ["tensor/loop/none/async", "fast/loop/none/async"]
    (saved,) = (tmp_path / "results").glob("*/engine_quick.json")  # quick by default, filed as such
    assert json.loads(saved.read_text())["rows"] == data["rows"]
    from labkit.engine.runs import TRACE_STEPS
    from labkit.engine.config import get_model_config
    from labkit.engine.model import HEAD_OPS, LAYER_OPS, TAIL_OPS
    from labkit.trace.capture import read_trace

    tiny = get_model_config("tiny")
    kernels_per_step = len(HEAD_OPS) + tiny.num_layers * len(LAYER_OPS) + len(TAIL_OPS)  # 1 + 2 x 11 + 3
    for r in data["rows"]:
        # 16 requests in steady decode: one token each per step, no prefix ranges, so no range copies
        assert r["tokens_per_step"] == 16 and r["batch_seqs"] == 16 and r["h2d_per_step"] == 0
        assert r["steps"] == 2 and 0.0 <= r["device_idle_frac"] <= 1.0
        events = read_trace(r["trace"])["traceEvents"]
        steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
        kernels = [e for e in events if e.get("cat") == "kernel"]
        memcpy = [e for e in events if e.get("cat") == "gpu_memcpy"]
        assert len(steps) == TRACE_STEPS and len(kernels) == TRACE_STEPS * kernels_per_step
        # each step copies its six inputs in (pinned) and its sampled ids out
        assert sorted({e["name"] for e in memcpy}) == ["Memcpy DtoH (Device -> Pinned)", "Memcpy HtoD (Pinned -> Device)"]
        assert len(memcpy) == TRACE_STEPS * 7
    assert len(list((tmp_path / "tr").glob("*/*.pt.trace.json.gz"))) == 2


def test_bench_engine_rewrites_its_result_after_each_variant(tmp_path, monkeypatch, capsys):
    """A run stopped after its first variant leaves that variant's row, marked incomplete."""
    import labkit.engine.loop as loop

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    real, calls = loop.summarize_run, []

    def stops_at_the_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(loop, "summarize_run", stops_at_the_second)
    rc = main(["bench", "engine", "--device", "sim", "--model", "tiny", "--num-requests", "8", "--steps", "2",
               "--warmup", "1", "--placeholders", "tensor,list,fast", "--scheduling", "loop", "--prefix-ranges",
               "none", "--profile", "parametric"])
    assert rc == 130 and "interrupted" in capsys.readouterr().err
    (saved,) = (tmp_path / "results").glob("*/engine_quick.json")
    data = json.loads(saved.read_text())
    assert data["complete"] is False and [r["variant"] for r in data["rows"]] == ["tensor/loop/none/async"]


def test_bench_engine_cudagraph_modes_in_rows_and_trace_metadata(tmp_path, monkeypatch, capsys):
    from labkit.trace.capture import read_trace

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    rc = main(["bench", "engine", "--device", "sim", "--model", "tiny", "--num-requests", "8", "--steps", "2",
               "--warmup", "1", "--placeholders", "fast", "--scheduling", "cursor", "--prefix-ranges", "none,per_layer",
               "--cudagraph", "none,full", "--trace-dir", str(tmp_path / "tr"), "--json", str(tmp_path / "e.json"),
               "--profile", "parametric", "--no-save"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "full -> piecewise" in out  # the per_layer fallback is printed
    data = json.loads((tmp_path / "e.json").read_text())
    assert data["params"]["cudagraph"] == ["none", "full"]
    assert data["params"]["graph_replay_origin"] == "parametric, not measured"
    rows = {r["variant"]: r for r in data["rows"]}
    assert set(rows) == {"fast/cursor/none/async", "fast/cursor/per_layer/async",
                         "fast/cursor/none/async/full", "fast/cursor/per_layer/async/full"}
    for r in rows.values():
        assert {"variant", "cudagraph", "device_idle_frac", "tokens_per_s_median"} <= set(r)
    assert rows["fast/cursor/none/async/full"]["cudagraph_run"] == "full"
    assert rows["fast/cursor/none/async/full"]["replays_per_step"] == 1
    assert rows["fast/cursor/per_layer/async/full"]["cudagraph_run"] == "piecewise"
    assert rows["fast/cursor/none/async"]["replays_per_step"] == 0
    traces = {p.parent.name: p for p in (tmp_path / "tr").glob("*/*.pt.trace.json.gz")}
    meta = read_trace(traces["fast-cursor-per_layer-async-full"])["labkit"]
    assert meta["cudagraph"] == "full" and meta["cudagraph_run"] == "piecewise" and meta["source"] == "simulated"


def test_bench_engine_fallback_mode_shares_the_run_it_falls_back_to(tmp_path, monkeypatch, capsys):
    """per_layer cannot run under full graphs: with piecewise already in the set, its full row is
    that piecewise run (same figures, same trace), not a second run; other variants still run per mode."""
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    rc = main(["bench", "engine", "--device", "sim", "--model", "tiny", "--num-requests", "8", "--steps", "2",
               "--warmup", "1", "--placeholders", "fast", "--scheduling", "cursor", "--prefix-ranges", "none,per_layer",
               "--cudagraph", "none,piecewise,full", "--trace-dir", str(tmp_path / "tr"),
               "--json", str(tmp_path / "e.json"), "--profile", "parametric", "--no-save"])
    assert rc == 0, capsys.readouterr().out
    rows = {r["variant"]: r for r in json.loads((tmp_path / "e.json").read_text())["rows"]}
    assert len(rows) == 6
    full, pw = rows["fast/cursor/per_layer/async/full"], rows["fast/cursor/per_layer/async/piecewise"]
    assert full["same_run_as"] == "fast/cursor/per_layer/async/piecewise"
    assert full["cudagraph"] == "full" and full["cudagraph_run"] == "piecewise" and "per_layer" in full["cudagraph_note"]
    assert full["median_ns"] == pw["median_ns"] and full["trace"] == pw["trace"]
    assert all("same_run_as" not in r for v, r in rows.items() if v != "fast/cursor/per_layer/async/full")
    assert rows["fast/cursor/none/async/full"]["cudagraph_run"] == "full"
    folders = {p.parent.name for p in (tmp_path / "tr").glob("*/*.pt.trace.json.gz")}
    assert len(folders) == 5 and "fast-cursor-per_layer-async-full" not in folders


@pytest.mark.parametrize("argv", [
    ["--device", "sim", "--cudagraph", "bogus"],
    ["--device", "cpu", "--cudagraph", "full"],
    ["--device", "sim", "--placeholders", "bogus"],
    ["--device", "sim", "--steps", "1"],
    ["--device", "sim", "--write-profile", "x.json"],
    ["--device", "sim", "--profile", "no-such-profile"],
    ["--device", "tpu"],
])
def test_bad_input_is_one_line_exit_2(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    assert main(["bench", "engine", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("labkit bench engine: error:")
    assert not list(tmp_path.glob("*/*.json"))


def test_figures_and_widget_callback():
    from labkit.viz.lab.engine import METRICS, plot_engine_bars
    from labkit.widgets.engine import run_selection

    rows, fig = run_selection(["fast"], ["cursor"], ["none", "per_step"], num_requests=8, steps=2, warmup=1,
                              model="tiny")
    assert [r["prefix_ranges"] for r in rows] == ["none", "per_step"]
    rows_g, _ = run_selection(["fast"], ["cursor"], ["none"], num_requests=8, steps=2, warmup=1, model="tiny",
                              cudagraph="full")
    assert rows_g[0]["cudagraph_run"] == "full" and rows_g[0]["replays_per_step"] == 1
    assert len(fig.data) == len(METRICS) and "simulated" in fig.layout.title.text
    assert len(fig.layout.updatemenus[0].buttons) == len(METRICS)
    fig2 = plot_engine_bars(rows, metric="device_idle_frac")
    assert [t.visible for t in fig2.data] == [k == "device_idle_frac" for k in METRICS]
    with pytest.raises(ValueError):
        plot_engine_bars(rows, metric="nope")


def test_eager_vs_graph_timelines_switch_with_a_menu(tmp_path):
    from labkit.engine.runs import run_variants
    from labkit.engine.device.profiles import parametric_profile
    from labkit.viz.lab.engine import plot_mode_timelines

    variants = [("fast", "cursor", "none", True, m) for m in ("none", "full")]
    variants += [("tensor", "loop", "none", True, m) for m in ("none", "full")]
    rows, _ = run_variants("sim", variants, model="tiny", workload="small", num_requests=4, steps=2, warmup=1,
                           profile=parametric_profile(), trace_dir=tmp_path)
    tr = {r["variant"]: r["trace"] for r in rows}
    fig = plot_mode_timelines({"fast/cursor": (tr["fast/cursor/none/async"], tr["fast/cursor/none/async/full"]),
                               "tensor/loop": (tr["tensor/loop/none/async"], tr["tensor/loop/none/async/full"])})
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["fast/cursor", "tensor/loop"]
    first, second = (b.args[0]["visible"] for b in buttons)
    assert any(first) and any(second) and not any(a and b for a, b in zip(first, second))
    assert [t.visible for t in fig.data] == first
    assert "SIMULATED" in fig.layout.title.text
    # both panels have device lanes; the graph run's kernels come from one replay per step
    assert {t.yaxis for t in fig.data} == {"y", "y2"}


def test_step_model_rows_hand_worked():
    from labkit.engine.recorded import step_model_rows

    def row(variant, sched_ms, step_ms, async_=True):
        return {"variant": variant, "async_scheduling": async_, "tokens_per_s_median": 1.0, "median_ns": step_ms * 1e6,
                "device_busy_per_step_ns": 10e6, "host_schedule_ns": sched_ms * 1e6, "host_prepare_ns": 1e6,
                "host_forward_ns": 0.0, "host_sample_ns": 0.0}
    rows = step_model_rows([row("tensor/loop/none/async/full", 20.0, 21.0), row("list/loop/none/async/full", 2.0, 10.5),
                            row("list/loop/none/sync/full", 2.0, 13.0, async_=False),
                            {"variant": "gpu", "median_ns": 1.0, "tokens_per_s_median": 1.0}])
    assert [r["variant"] for r in rows] == ["tensor/loop/none/async/full", "list/loop/none/async/full",
                                            "list/loop/none/sync/full"]  # no device busy: not set beside it
    t, lst, sync = rows
    # host 21 vs device 10: host-bound, async 21, sync 31; host 3: device-bound, async 10, sync 13
    assert (t["host_ms"], t["model_async_ms"], t["model_sync_ms"], t["bound"]) == (21.0, 21.0, 31.0, "host")
    assert (lst["model_async_ms"], lst["bound"], lst["measured_over_model"]) == (10.0, "device", pytest.approx(0.05))
    assert sync["regime"] == "sync" and sync["measured_over_model"] == pytest.approx(0.0)
