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
    assert {r["placeholder"] for r in data["rows"]} == {"tensor", "fast"}
    for r in data["rows"]:
        assert r["tokens_per_s_median"] > 0 and r["tokens_per_s_window"] > 0 and 0.0 <= r["device_idle_frac"] <= 1.0
    assert len(list((tmp_path / "results").glob("*/engine.json"))) == 1
    assert len(list((tmp_path / "tr").glob("*/*.pt.trace.json.gz"))) == 2


@pytest.mark.parametrize("argv", [
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
    assert len(err) == 1 and err[0].startswith("labkit: error:")
    assert not list(tmp_path.glob("*/*.json"))


def test_figures_and_widget_callback():
    from labkit.viz.engine import METRICS, plot_engine_bars, plot_step_series
    from labkit.widgets.engine import run_selection

    rows, fig = run_selection(["fast"], ["cursor"], ["none", "per_step"], num_requests=8, steps=2, warmup=1,
                              model="tiny")
    assert [r["prefix_ranges"] for r in rows] == ["none", "per_step"]
    assert len(fig.data) == len(METRICS) and "simulated" in fig.layout.title.text
    assert len(fig.layout.updatemenus[0].buttons) == len(METRICS)
    fig2 = plot_engine_bars(rows, metric="device_idle_frac")
    assert [t.visible for t in fig2.data] == [k == "device_idle_frac" for k in METRICS]
    steps = [{"variant": "a", "step": i, "output_ns": i * 2_000_000} for i in range(4)]
    s = plot_step_series(steps)
    assert list(s.data[0].y) == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError):
        plot_engine_bars(rows, metric="nope")
