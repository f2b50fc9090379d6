"""Notebook 08's grid of the serving simulator's choices (labkit.viz.vllm.serve_choices), on
hand-made host-fitted runs whose figures are chosen so each sentence's numbers are worked by hand."""

from __future__ import annotations

from findings_results import CPU_A, CPU_B, record

from labkit.serve.bench import result_name
from labkit.viz.vllm import serve_choices

PUB = {"mean_tpot_ms": (33.81, 24.58), "mean_ttft_ms": (137900.0, 124300.0), "duration_s": (413.16, 325.41),
       "finish_spread_s": (4.81, 4.49)}


def _rows(base_tpot, ratio, ttft_s, spread_s, ttft_after_s=None):
    rows = [{"kind": "ratio", "arm": "pr40143/baseline", "gpu": "h200", "metric": "output_throughput_ratio",
             "predicted": ratio, "published": 1.27, "error": ratio / 1.27 - 1}]
    values = {"mean_tpot_ms": (base_tpot, 24.58), "mean_ttft_ms": (ttft_s * 1e3, (ttft_after_s or ttft_s) * 1e3),
              "duration_s": (400.0, 320.0), "finish_spread_s": (spread_s, spread_s)}
    for metric, (b, a) in values.items():
        for arm, pred, pub in (("baseline", b, PUB[metric][0]), ("pr40143", a, PUB[metric][1])):
            row = {"kind": "metric", "arm": arm, "gpu": "h200", "metric": metric, "predicted": pred,
                   "published": pub, "error": pred / pub - 1}
            if arm == "pr40143" and metric == "mean_tpot_ms":
                row["fitted"] = True
            rows.append(row)
    return rows


def _record(store, order, sched, rows, machine=CPU_A, params_order=None):
    params = {"gpu": "h200", "api_server": {"order": params_order or order}, "scheduler_host_cost": sched,
              "fitted": {"host_per_request_ns": 120_000.0}}
    record(store, result_name("host-per-request", order, sched), rows, machine=machine, source="simulated",
           params=params)


def test_the_grid_in_order_one_machine_and_what_each_choice_moves(tmp_path):
    # media-first: baseline TPOT 30 ms alone in the run, 40 ms inside the step: brackets 33.81;
    # ratio 1.2 and 1.4 bracket 1.27. side-by-side (alone): TTFT 115 s against media-first's 85 s
    _record(tmp_path, "media-first", "measured", _rows(30.0, 1.2, 85.0, 26.0))
    _record(tmp_path, "media-first", "census", _rows(40.0, 1.4, 85.0, 27.0))
    _record(tmp_path, "side-by-side", "measured", _rows(29.0, 1.15, 115.0, 10.5))
    # another machine's single run, and a run whose recorded order is not the one its name says
    _record(tmp_path, "side-by-side", "census", _rows(41.0, 1.4, 115.0, 10.0), machine=CPU_B)
    _record(tmp_path, "side-by-side", "census", _rows(41.0, 1.4, 115.0, 10.0), params_order="media-first")
    got = serve_choices.recorded_choices(tmp_path)
    assert [(r.slug, r.params["api_server"]["order"], r.params["scheduler_host_cost"]) for r in got] == [
        ("cpu-a", "media-first", "measured"), ("cpu-a", "side-by-side", "measured"), ("cpu-a", "media-first", "census")]
    assert [r.slug for r in serve_choices.recorded_choices(tmp_path, machine="cpu-b")] == ["cpu-b"]

    table = serve_choices.choices_table(got)
    assert list(table["handover shape"]) == ["media-first", "side-by-side", "media-first"]
    assert list(table["schedule() charged"]) == ["alone in the run", "alone in the run", "inside vLLM's step (census)"]
    assert table["fitted us/request"].tolist() == [120.0] * 3
    # 30 / 33.81 - 1 = -11.3%; 1.2 / 1.27 - 1 = -5.5%; TTFT 85 s / 137.9 s - 1 = -38.4%
    assert table["baseline TPOT ms"][0] == "30 (-11.3%)" and table["ratio"][0] == "1.2 (-5.5%)"
    assert table["baseline TTFT s"][0] == "85 (-38.4%)" and table["finish spread s"][1] == "10.5 / 10.5 (published 4.81 / 4.49)"

    text = serve_choices.choices_text(got)
    assert "moves the baseline's mean TPOT from 30.0 to 40.0 ms and the ratio from 1.200x to 1.400x" in text
    assert "bracket the published baseline" in text
    assert "mean TTFT from 85.0 to 115.0 s (published 137.9 s)" in text and "finish spread from 26.0 to 10.5 s" in text
    # 115 < 0.9 x 137.9: still short
    assert "the intake is shorter than the published TTFT asks for" in text
    # every run has equal arms' TTFT; published 137.9 - 124.3 = 13.6 s
    assert "the published one is 13.6 s, the runs' at most 0.0 s" in text


def test_a_grid_without_a_pair_says_so_and_no_run_says_how_to_record_one(tmp_path):
    assert serve_choices.recorded_choices(tmp_path) == []
    assert serve_choices.choices_text([]) == serve_choices.NO_CHOICES
    _record(tmp_path, "media-first", "measured", _rows(30.0, 1.2, 85.0, 26.0))
    _record(tmp_path, "side-by-side", "census", _rows(40.0, 1.4, 115.0, 10.0))
    got = serve_choices.recorded_choices(tmp_path)
    assert len(got) == 2
    assert serve_choices.choices_text(got).startswith("No run gives the arms' TTFT difference")
    # a TPOT outside the two costs claims no bracket; an intake as long as published claims no shortfall
    _record(tmp_path, "media-first", "census", _rows(31.0, 1.22, 85.0, 26.0))
    _record(tmp_path, "side-by-side", "measured", _rows(29.0, 1.15, 130.0, 10.5, ttft_after_s=117.0))
    text = serve_choices.choices_text(serve_choices.recorded_choices(tmp_path))
    assert "from 30.0 to 31.0 ms" in text and "bracket" not in text
    assert "shorter than the published TTFT" not in text and "No run gives" not in text
