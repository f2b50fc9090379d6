"""Notebook 08's check summary and schedule-saving figure, on a hand-made census."""

from types import SimpleNamespace

from labkit.viz import inside_vllm


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
