"""``vllm bench serve``'s metrics on a hand-computed two-request example."""

from __future__ import annotations

import pytest

from labkit.serve.metrics import compute_metrics, percentile


def test_two_requests_by_hand():
    # A: tokens at 0.5, 1.2, 1.8 s; B: at 1.0, 2.5 s; prompts of 10 and 20 tokens
    m = compute_metrics([[0.5, 1.2, 1.8], [1.0, 2.5]], [10, 20])
    assert m.duration_s == 2.5 and m.completed == 2
    assert (m.total_input_tokens, m.total_output_tokens) == (30, 5)
    assert m.request_throughput == pytest.approx(0.8)
    assert m.output_throughput == pytest.approx(2.0)
    assert m.total_token_throughput == pytest.approx(14.0)
    # one-second buckets 0..3: 0.5 | 1.0, 1.2, 1.8 | 2.5 | -
    assert m.max_output_tokens_per_s == 3.0
    assert m.mean_ttft_ms == pytest.approx(750.0) and m.median_ttft_ms == pytest.approx(750.0)
    assert m.p99_ttft_ms == pytest.approx(995.0)
    # TPOT: A (1.8 - 0.5) / 2 = 0.65 s, B (2.5 - 1.0) / 1 = 1.5 s
    assert m.mean_tpot_ms == pytest.approx(1075.0) and m.median_tpot_ms == pytest.approx(1075.0)
    # ITL: 0.7, 0.6, 1.5
    assert m.mean_itl_ms == pytest.approx(2800.0 / 3)
    assert m.mean_e2el_ms == pytest.approx(2150.0)


def test_single_token_request_has_no_tpot():
    m = compute_metrics([[1.0], [1.0, 3.0]], [1, 1])
    assert m.mean_tpot_ms == pytest.approx(2000.0)  # only the second request has a TPOT
    assert m.completed == 2


def test_percentile_interpolates_like_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0], 99) == 10.0
    assert percentile([], 50) == 0.0
