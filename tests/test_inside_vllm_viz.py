"""Notebook 08's census figures and tables, on a hand-made census."""

from types import SimpleNamespace

import pytest

from labkit.viz.vllm import inside_vllm


def _census():
    rows = []
    for (n, m), sched, alone in (((4, 8), {"baseline": 900.0, "merged": 400.0}, {"baseline": 700.0, "merged": 300.0}),
                                 ((16, 8), {"baseline": 3000.0, "merged": 1000.0}, {"baseline": 2500.0, "merged": 900.0})):
        for v in ("baseline", "merged"):
            rows.append({"num_requests": n, "images": m, "variant": v, "phase": "step", "median_us": 10_000.0})
            rows.append({"num_requests": n, "images": m, "variant": v, "phase": "schedule", "median_us": sched[v]})
            rows.append({"num_requests": n, "images": m, "variant": v, "phase": "scheduler_only", "median_us": alone[v]})
    checks = [{"check": "phases add up", "num_requests": 4, "images": 8, "variant": "baseline", "passed": True, "detail": "a"},
              {"check": "phases add up", "num_requests": 16, "images": 8, "variant": "baseline", "passed": False,
               "detail": "wrapper 90.0%"},
              {"check": "schedule saving matches the scheduler alone", "num_requests": 16, "images": 8,
               "variant": "baseline-merged", "passed": True, "detail": "b"}]
    return SimpleNamespace(rows=rows, params={"checks": checks, "vllm_version": "0.0"}, source="measured-cpu",
                           slug="test-machine", name="vllm_step")


def _census_with_alone(slug="machine-a", scale=1.0, llc=None):
    """One point, 128 x 32: schedule 9000/2000 us in the step, 8000/1800 in the steps with the forward off
    the host (step 25000/16000, every other phase 50/50 there), the stand-in 7500/1000, the engine's scheduler
    alone 6500/1500 back to back and 11000/3000 swept (all times ``scale``)."""
    rows = []
    figures = {"step": (30_000.0, 20_000.0), "schedule": (9000.0, 2000.0), "scheduler_only": (7500.0, 1000.0),
               "schedule_alone": (6500.0, 1500.0), "schedule_alone_swept": (11_000.0, 3000.0),
               "off_host:step": (25_000.0, 16_000.0), "off_host:schedule": (8000.0, 1800.0)}
    figures.update({p: (100.0, 100.0) for p in (*inside_vllm.PHASE_COLOURS, "encoder_inputs") if p not in figures})
    figures.update({"off_host:" + p: (50.0, 50.0) for p in inside_vllm.PHASE_COLOURS if "off_host:" + p not in figures})
    for phase, (b, m) in figures.items():
        for v, us in (("baseline", b), ("merged", m)):
            rows.append({"num_requests": 128, "images": 32, "variant": v, "phase": phase, "median_us": us * scale})
    return SimpleNamespace(rows=rows, params={"checks": [], "vllm_version": "0.0", "llc_bytes": llc},
                           source="measured-cpu", slug=slug, name="vllm_step", machine={"cpu_model": "cpu " + slug},
                           labkit_commit="abc1234")


def test_two_machines_get_a_menu_and_the_first_is_shown():
    a, b = _census_with_alone("machine-a"), _census_with_alone("machine-b", scale=2.0)
    per = len(inside_vllm.PHASE_COLOURS)
    fig = inside_vllm.plot_phase_census([a, b])
    assert len(fig.data) == 2 * per
    assert [t.visible for t in fig.data] == [True] * per + [False] * per
    (menu,) = fig.layout.updatemenus
    assert [btn.label for btn in menu.buttons] == ["machine-a", "machine-b"]
    assert list(menu.buttons[1].args[0]["visible"]) == [False] * per + [True] * per


def test_input_stages_one_bar_per_stage_and_machine():
    def res(slug, us):
        rows = [{"stage": "media_decode", "per_image_median_us": us}, {"stage": "add_request", "per_image_median_us": 2 * us}]
        return SimpleNamespace(rows=rows, params={"image_size": "1024x1536"}, source="measured-cpu", slug=slug)

    fig = inside_vllm.plot_input_stages([res("machine-a", 1000.0), res("machine-b", 3000.0)])
    assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [
        ("machine-a", ["media_decode", "add_request"], [1.0, 2.0]), ("machine-b", ["media_decode", "add_request"], [3.0, 6.0])]
    assert fig.layout.barmode == "group" and fig.layout.showlegend
    assert len(inside_vllm.plot_input_stages(res("machine-a", 1000.0)).data) == 1
    assert not inside_vllm.plot_input_stages([]).data


def test_saving_by_phase_worked_by_hand():
    # step 30000 -> 20000 us; schedule 9000 -> 2000; every other phase 100 -> 100, but forward 2000 -> 1000
    census = _census_with_alone()
    for r in census.rows:
        if r["phase"] == "forward":
            r["median_us"] = 2000.0 if r["variant"] == "baseline" else 1000.0
    t = inside_vllm.saving_by_phase(census).set_index("phase")
    assert t.loc["step", "saving_ms"] == 10.0 and t.loc["step", "share"] == 1.0
    assert t.loc["schedule", ["before_ms", "after_ms", "saving_ms"]].tolist() == [9.0, 2.0, 7.0]
    assert t.loc["schedule", "share"] == 0.7 and t.loc["forward", "share"] == 0.1
    assert t.loc["sample", "saving_ms"] == 0.0
    # off the host: step 25000 -> 16000, schedule 8000 -> 1800, the rest 50 -> 50
    assert t.loc["step", "off_host_saving_ms"] == 9.0 and t.loc["schedule", "off_host_saving_ms"] == 6.2
    assert t.loc["schedule", "off_host_share"] == 6200 / 9000 and t.loc["forward", "off_host_saving_ms"] == 0.0
    assert inside_vllm.saving_by_phase(None).empty and inside_vllm.saving_by_phase(_census()).empty




def test_the_answers_views_read_the_result(tmp_path):
    from findings_results import write_results

    from labkit.gpu.device_model import decode_step_ms
    from labkit.facts import GEMMA4_E4B
    from labkit.results import PR_TABLE, find
    from labkit.viz.vllm import pr_table

    write_results(tmp_path)
    res = find(PR_TABLE, size="full", root=tmp_path)
    table = pr_table.table_frame(res).set_index("figure")
    assert table.loc["peak output tok/s", "pr40143 predicted"] == 9600
    assert table.loc["peak output tok/s", "pr40143 error"] == "+5.6%"
    assert table.loc["peak output tok/s", "baseline error"] == "inferred from it"
    assert table.loc["mean TPOT (ms)", "pr40143 predicted"] == "not predicted"
    assert table.loc["mean TPOT (ms)", "pr40143 published"] == 24.58 and table.loc["mean TPOT (ms)", "pr40143 error"] == ""
    gains = pr_table.gains_frame(res).set_index("gain")
    assert gains.loc["peak_output_tok_s", "predicted"] == "1.53" and gains.loc["peak_output_tok_s", "published"] == "1.48"
    assert gains.loc["output_tok_s", "predicted"] == "not predicted" and gains.loc["output_tok_s", "published"] == "1.27"
    inf = pr_table.inferred_frame(res)
    assert inf["inferred"].tolist() == [2.0] and inf["the lab measures"][0] == "cpu-a 1.00-4.00 us"
    assert len(pr_table.peaks_frame(res)) == 4
    parts = pr_table.device_parts_frame("h200")
    assert parts["time_ms"].sum() == pytest.approx(decode_step_ms(GEMMA4_E4B, "h200", 128, 1024 + 32 * 262 + 1))
    assert all(f.startswith(("measured on the H200: ", "carried over: ")) for f in parts["from"])
    assert find(PR_TABLE, root=tmp_path / "none") is None
