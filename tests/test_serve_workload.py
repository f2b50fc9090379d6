"""The published run's prompts, the run's phases and the rows against the published table."""

from __future__ import annotations

import pytest

from labkit.errors import UsageError
from labkit.serve.bench import metric_rows, published_value, ratio_row
from labkit.serve.breakdown import phase_of, requests_buckets
from labkit.serve.clock import StepTiming
from labkit.serve.workload import get_workload, prompt_layout


def test_full_prompt_layout():
    w = get_workload("full")
    assert (w.requests, w.images, w.text_tokens, w.output_tokens) == (128, 32, 1024, 8000)
    total, spans = prompt_layout(w)
    # 1,024 text tokens in 33 runs (31 each, the first 32) around 32 placeholders of 262
    assert total == 1024 + 32 * 262
    assert spans[0].offset == 32 and spans[1].offset == 32 + 262 + 31
    assert all(s.length == 262 and s.num_embeds == 260 and not s.is_embed[0] and not s.is_embed[-1] for s in spans)
    assert total - (spans[-1].offset + spans[-1].length) == 31


def test_quick_and_unknown_sizes():
    assert get_workload("quick").requests < get_workload("full").requests
    with pytest.raises(UsageError):
        get_workload("huge")


def _step(prefill=0, start=0.0, finished=0):
    return StepTiming(0, start, start + 1, 1.0, 1.0, 1, prefill, 0, 1, finished)


def test_run_phases():
    assert phase_of(_step(prefill=5, start=100.0), 3, 50.0) == "mixed prefill+decode"
    assert phase_of(_step(start=10.0), 3, 50.0) == "decode, admission open"
    assert phase_of(_step(start=60.0), 3, 50.0) == "pure decode"
    assert phase_of(_step(start=60.0, finished=1), 3, 50.0) == "tail"


def test_requests_buckets_end_at_the_census_points():
    assert requests_buckets([1, 8, 32, 128]) == [(1, 1), (2, 8), (9, 32), (33, 128), (129, 1 << 30)]


def test_rows_against_the_published_table():
    assert published_value("mean_tpot_ms", "before") == 33.81
    assert published_value("mean_ttft_ms", "after") == pytest.approx(124300.0)
    assert published_value("mean_itl_ms", "before") is None
    metrics = {m: 1.0 for m in ("duration_s", "completed", "total_input_tokens", "total_output_tokens",
                                "request_throughput", "output_throughput", "total_token_throughput",
                                "max_output_tokens_per_s", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                                "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "mean_e2el_ms")}
    metrics["mean_tpot_ms"] = 36.0
    rows = {r["metric"]: r for r in metric_rows("baseline", "h200", metrics, compare=True)}
    assert rows["mean_tpot_ms"]["error"] == pytest.approx((36.0 - 33.81) / 33.81)
    assert rows["mean_itl_ms"]["published"] is None and rows["mean_itl_ms"]["error"] is None
    quiet = metric_rows("merged", "h200", metrics, compare=True)
    assert all(r["published"] is None for r in quiet)  # beyond the PR: nothing to compare
    ratio = ratio_row("h200", {"baseline": {"output_throughput": 100.0}, "pr40143": {"output_throughput": 127.0}},
                      compare=True)
    assert ratio["predicted"] == pytest.approx(1.27) and abs(ratio["error"]) < 1e-3
