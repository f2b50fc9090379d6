"""``labkit bench h2d``: workload ranges, result rows and the command line."""

from __future__ import annotations

import json

import pytest

from labkit.attn import bench_h2d
from labkit.cli import main as cli_main
from labkit.device import has_cuda
from labkit.results import load_results


def test_batch_ranges_follow_gemma_layout():
    ranges = bench_h2d.make_batch_ranges(3, 2)
    assert len(ranges) == 3
    for row in ranges:
        # two images of 256 soft tokens each, framed by one marker token on each side
        assert len(row) == 2
        assert all(e - s + 1 == 256 for s, e in row)
        assert row[1][0] - row[0][1] > 2  # markers and text between images


def test_measure_host_row_counts():
    ranges = [[(1, 4), (8, 9)], [], [(3, 3)]]
    row = bench_h2d.measure_host("per_layer", ranges, 5, "cpu", repeats=2, warmup=1)
    assert row["h2d_per_step"] == 5 * (3 + 1)  # per layer: one copy per row + nested lengths
    assert row["copy_target"] == "cpu-equivalent"
    assert row["median_ns"] > 0 and row["p20_ns"] <= row["median_ns"] <= row["p80_ns"]
    cached = bench_h2d.measure_host("cached", ranges, 5, "cpu", repeats=2, warmup=1)
    assert cached["h2d_per_step"] == 0  # steady state, even with freshly rebuilt range lists
    step = bench_h2d.measure_host("per_step", ranges, 5, "cpu", repeats=2, warmup=1)
    assert step["h2d_per_step"] == 1 and step["h2d_bytes_per_step"] == 3 * 2 * 8


def test_cli_small_run_saves_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    out_json = tmp_path / "h2d.json"
    rc = cli_main(["bench", "h2d", "--device", "cpu", "--seqs", "4", "--images", "2", "--layers", "2,3",
                   "--sweep-seqs", "1,2", "--sweep-layers", "2", "--repeats", "3", "--json", str(out_json)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "per_layer" in out and "cached" in out
    names = {r.name for r in load_results(tmp_path / "results")}
    assert names == {"h2d_step_quick", "h2d_sweep_quick"}  # quick runs never overwrite full recordings
    payload = json.loads(out_json.read_text())
    step = payload["h2d_step"]
    assert step["source"] == "measured-cpu"
    by_point = {(r["variant"], r["layers"]): r for r in step["rows"]}
    assert set(by_point) == {(v, n) for v in ("per_layer", "per_step", "pinned", "cached") for n in (2, 3)}
    # copies per step, by hand: per_layer one per sequence + one for the row lengths, on every layer
    assert [by_point[("per_layer", n)]["h2d_per_step"] for n in (2, 3)] == [2 * (4 + 1), 3 * (4 + 1)]
    assert [by_point[(v, 3)]["h2d_per_step"] for v in ("per_step", "pinned", "cached")] == [1, 1, 0]
    for (v, n), r in by_point.items():  # each point against per_layer at its own layer count
        assert r["speedup_vs_per_layer"] == pytest.approx(by_point[("per_layer", n)]["median_ns"] / r["median_ns"])
    assert len(payload["h2d_sweep"]["rows"]) == 2 * 4


@pytest.mark.parametrize("argv", [
    ["--strategies", "per_layer,bogus"],
    ["--seqs", "0"],
    ["--layers", "3,x"],
    ["--gpu-idle", "on", "--device", "cpu"],
    ["--device", "tpu"],
])
def test_cli_bad_input_exits_2(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    rc = cli_main(["bench", "h2d", *argv])
    assert rc == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_cli_help():
    assert cli_main(["bench", "h2d", "--help"]) == 0


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU to profile device idle time")
def test_gpu_idle_counts_match_profile():
    ranges = bench_h2d.make_batch_ranges(8, 4)
    rows = [bench_h2d.measure_gpu_idle(s, ranges, 4, layer_mb=8, steps=2, warmup=1)
            for s in ("per_step", "pinned", "cached")]
    assert all(r["counts_match"] for r in rows)
    assert rows[2]["profile_pageable"] + rows[2]["profile_pinned"] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU to profile device idle time")
def test_gpu_idle_traces_are_kept_whole_and_named(tmp_path):
    import gzip
    import json

    got = bench_h2d.run_benchmarks("cuda", strategies=["per_step"], num_seqs=4, images=2, layers=(2,), sweep=False,
                                   layer_mb=8, trace_dir=str(tmp_path), save=False)
    rows = got["h2d_gpu_idle"].rows
    assert [p.name for p in tmp_path.iterdir()] == ["h2d-per_step-S4-L2.pt.trace.json.gz"]  # no temporary left
    with gzip.open(tmp_path / "h2d-per_step-S4-L2.pt.trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    assert events and rows[0]["counts_match"]  # the kept file is the one the counts were read from


# -- figures and widget -----------------------------------------------------------------------

def _result(name, rows, source="measured-cpu"):
    from labkit.results import make_result

    return make_result(name, rows, source=source, machine={"slug": "test-machine"})


def test_figures_from_results():
    from labkit.viz.lab.h2d import plot_before_after, plot_gpu_idle, plot_sweep

    ranges = bench_h2d.make_batch_ranges(2, 1)
    rows = [bench_h2d.measure_host(s, ranges, L, "cpu", repeats=1, warmup=0)
            for L in (2, 3) for s in ("per_layer", "per_step", "cached")]
    fig = plot_before_after([_result("h2d_step", rows)])
    assert len(fig.data) == 2  # one bar trace per layer count
    assert [t.visible for t in fig.data] == [True, False]
    assert "a GPU would make" in fig.layout.title.text
    layer_menu, metric_menu = fig.layout.updatemenus
    assert [b.label for b in layer_menu.buttons] == ["2 layers", "3 layers"]
    copies = metric_menu.buttons[1].args[0]["y"]
    assert list(copies[0]) == [2 * (2 + 1), 1, 0]  # per_layer, per_step, cached at 2 layers
    sweep = plot_sweep([_result("h2d_sweep", rows)])
    assert len(sweep.data) == 2 * 3
    empty = plot_gpu_idle([])
    assert "no GPU result" in empty.layout.annotations[0].text


def test_gpu_idle_figure_sets_idle_beside_the_profiled_step_it_comes_from():
    """Idle per step is read from the profiled steps, so its peer is the profiled step (busy + idle), not
    only the unprofiled median, which the profiler's own time per CUDA call can make shorter."""
    from labkit.viz.lab.h2d import plot_gpu_idle

    rows = [{"variant": "per_layer", "layers": 34, "model": "g", "idle_us_per_step": 226_000.0, "busy_us_per_step": 6_000.0,
             "step_median_ns": 160e6},
            {"variant": "per_step", "layers": 34, "model": "g", "idle_us_per_step": 1_500.0, "busy_us_per_step": 2_300.0,
             "step_median_ns": 5e6}]
    fig = plot_gpu_idle([_result("h2d_gpu_idle", rows, source="measured-gpu")])
    idle, profiled, unprofiled = fig.data
    assert list(idle.y) == [226_000.0, 1_500.0]
    assert list(profiled.y) == [232_000.0, 3_800.0] and all(p >= i for p, i in zip(profiled.y, idle.y))
    assert list(unprofiled.y) == [160_000.0, 5_000.0]
    assert "profiler" in fig.layout.title.text
    assert fig.layout.legend.y < 0 and fig.layout.legend.yanchor == "top"  # below the plot, clear of the axis


def test_widget_measures_and_renders():
    from labkit.widgets.h2d import format_rows, make_h2d_widget, measure_point

    rows = measure_point(2, 3, 1, "per_step", "cpu", repeats=1)
    assert [r["variant"] for r in rows] == ["per_step"] and rows[0]["h2d_per_step"] == 1
    html = format_rows(rows, "measured-cpu")
    assert "per_step" in html and "a GPU would make" in html
    box = make_h2d_widget("cpu", repeats=1)
    sliders = box.children[0].children
    sliders[0].value, sliders[1].value = 2, 2
    box.children[1].children[0].value = 1
    box.on_measure()
    out = box.children[-1].value
    assert all(name in out for name in ("per_layer", "per_step", "pinned", "cached"))
