"""Notebook 08's check summary and schedule-saving figure, on a hand-made census."""

import math
from types import SimpleNamespace

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


def test_checks_are_counted_and_failures_spelled_out():
    table = inside_vllm.checks_summary(_census())
    assert table.to_dict("records") == [{"check": "phases add up", "passed": 1, "of": 2},
                                        {"check": "schedule saving matches the scheduler alone", "passed": 1, "of": 1}]
    assert inside_vllm.failed_checks(_census()) == ["FAIL phases add up (16 x 8, baseline): wrapper 90.0%"]
    assert inside_vllm.checks_summary(None).empty and inside_vllm.failed_checks(None) == []


def test_schedule_saving_figure_draws_both_differences_per_point():
    fig = inside_vllm.plot_schedule_saving(_census())
    engine, alone = fig.data
    assert list(engine.x) == ["4 x 8", "16 x 8"] and list(engine.y) == [0.5, 2.0]  # (900-400), (3000-1000) us
    assert list(alone.y) == [0.4, 1.6]
    empty = inside_vllm.plot_schedule_saving(None)
    assert not empty.data and "vllm-step" in empty.layout.annotations[0].text


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


def test_schedule_saving_draws_every_way_in_order():
    fig = inside_vllm.plot_schedule_saving(_census_with_alone())
    assert [t.legendgroup for t in fig.data] == [p for p, _, _ in inside_vllm.SAVINGS]
    # step 9000 - 2000, off host 8000 - 1800, stand-in 7500 - 1000, alone 6500 - 1500, swept 11000 - 3000 (us -> ms)
    assert [list(t.y) for t in fig.data] == [[7.0], [6.2], [6.5], [5.0], [8.0]]
    older = _census_with_alone()  # a census recorded before the steps off the host: four ways
    older.rows = [r for r in older.rows if not r["phase"].startswith("off_host:")]
    assert [t.legendgroup for t in inside_vllm.plot_schedule_saving(older).data] == [
        p for p, _, _ in inside_vllm.SAVINGS if p != "off_host:schedule"]
    assert not fig.layout.updatemenus  # one machine: no menu


def test_two_machines_get_a_menu_and_the_first_is_shown():
    a, b = _census_with_alone("machine-a"), _census_with_alone("machine-b", scale=2.0)
    for fig, per in ((inside_vllm.plot_schedule_saving([a, b]), 5),
                     (inside_vllm.plot_phase_census([a, b]), len(inside_vllm.PHASE_COLOURS))):
        assert len(fig.data) == 2 * per
        assert [t.visible for t in fig.data] == [True] * per + [False] * per
        (menu,) = fig.layout.updatemenus
        assert [btn.label for btn in menu.buttons] == ["machine-a", "machine-b"]
        assert list(menu.buttons[1].args[0]["visible"]) == [False] * per + [True] * per
    saving = inside_vllm.plot_schedule_saving([a, b])
    assert list(saving.data[5].y) == [14.0]  # machine-b's step saving, twice machine-a's


def test_machines_table_worked_by_hand():
    first = _census_with_alone("machine-a", llc=32 * 2**20)
    first.params["machine_load"] = {"others_frac": 0.25, "steal_frac": 0.0}
    t = inside_vllm.machines_table([first, _census_with_alone("machine-b", scale=2.0)])
    a, b = t.to_dict("records")
    assert a["others_busy_frac"] == 0.25 and math.isnan(b["others_busy_frac"])
    assert (a["machine"], a["cpu"], a["llc_mib"], a["commit"]) == ("machine-a", "cpu machine-a", 32.0, "abc1234")
    assert (a["baseline_step_ms"], a["merged_step_ms"]) == (30.0, 20.0)
    assert (a["saving_schedule_ms"], a["saving_scheduler_only_ms"]) == (7.0, 6.5)
    assert a["step_over_scheduler_only"] == 7.0 / 6.5 and a["step_over_schedule_alone"] == 7.0 / 5.0
    assert a["saving_off_host_schedule_ms"] == 6.2 and a["off_host_over_scheduler_only"] == 6.2 / 6.5
    assert math.isnan(b["llc_mib"]) and b["saving_schedule_alone_swept_ms"] == 16.0
    assert inside_vllm.machines_table([_census()]).empty  # no 128 x 32 point


def test_recorded_censuses_put_this_machine_first(tmp_path, monkeypatch):
    import labkit.device
    from labkit.results import make_result, save_result

    for slug, name in (("cpu-aaa-2c", "vllm_step"), ("cpu-bbb-2c", "vllm_step"), ("cpu-bbb-2c", "vllm_step_quick"),
                       ("cpu-ccc-2c", "vllm_step_quick")):
        save_result(make_result(name, [{"phase": "step"}], source="measured-cpu", machine={"slug": slug},
                                command=None), tmp_path)
    here = {"slug": "cpu-bbb-2c"}
    monkeypatch.setattr(labkit.device, "describe_machine", lambda device=None: here)
    found = inside_vllm.recorded_censuses(tmp_path)
    assert [(r.slug, r.name) for r in found] == [("cpu-bbb-2c", "vllm_step"), ("cpu-aaa-2c", "vllm_step"),
                                                 ("cpu-ccc-2c", "vllm_step_quick")]
    assert inside_vllm.recorded_census(tmp_path).slug == "cpu-bbb-2c"
    here["slug"] = "elsewhere"
    assert inside_vllm.recorded_census(tmp_path).slug == "cpu-aaa-2c"
    assert inside_vllm.recorded_censuses(tmp_path / "empty") == [] and inside_vllm.recorded_census(tmp_path / "no") is None


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


def test_sim_rows_take_the_steps_with_the_forward_off_the_host_where_recorded():
    census = _census_with_alone()
    rows = inside_vllm.sim_rows(census, forward="off-host", steps=3)
    base = next(r for r in rows if r["vllm_variant"] == "baseline")
    assert "forward off the host" in base["host_from"]
    # off the host: other 50 + encoder 50, schedule 8000, prepare_inputs 50, sample 50, update 50 (us)
    assert base["engine_core_host_ms"] == 8.25
    measured = next(r for r in inside_vllm.sim_rows(census, steps=3) if r["vllm_variant"] == "baseline")
    assert measured["engine_core_host_ms"] == 9.5  # 100 + 100, 9000, 100, 100, 100
    census.rows = [r for r in census.rows if not r["phase"].startswith("off_host:")]
    assert inside_vllm.sim_rows(census, forward="off-host") == []
