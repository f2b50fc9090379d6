"""What ``vllm bench serve`` reports, computed from a run's token arrival times.

Definitions as vLLM's ``vllm/benchmarks/serve.py`` (``calculate_metrics``) computes them, every
request sent at t = 0 (request rate inf).

More: docs/reference.md, ``labkit.serve.metrics``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

__all__ = ["ServeMetrics", "compute_metrics", "percentile"]


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default), ``p`` in 0..100."""
    v = sorted(values)
    if not v:
        return 0.0
    k = (len(v) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


@dataclass(frozen=True)
class ServeMetrics:
    """``vllm bench serve``'s summary (s, ms, tokens, per second)."""

    duration_s: float
    completed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    mean_itl_ms: float
    mean_e2el_ms: float

    def as_dict(self) -> dict:
        return asdict(self)


def compute_metrics(token_s: list[list[float]], prompt_lens: list[int]) -> ServeMetrics:
    """Metrics of a run from each request's token arrival times (s since t = 0, when every request
    was sent) and prompt lengths; the duration is the last token's time."""
    done = [i for i, ts in enumerate(token_s) if ts]
    ttfts = [token_s[i][0] for i in done]
    lats = [token_s[i][-1] for i in done]
    ends = [token_s[i][-1] for i in done]
    tpots = [(token_s[i][-1] - token_s[i][0]) / (len(token_s[i]) - 1) for i in done if len(token_s[i]) > 1]
    itls = [b - a for i in done for a, b in zip(token_s[i], token_s[i][1:])]
    out_tokens = sum(len(token_s[i]) for i in done)
    in_tokens = sum(prompt_lens[i] for i in done)
    duration = max(ends) if ends else 0.0
    peak = 0.0
    if done:
        buckets = [0] * (int(math.ceil(duration)) + 1)
        for i in done:
            for t in token_s[i]:
                b = int(t)
                if 0 <= b < len(buckets):
                    buckets[b] += 1
        peak = float(max(buckets))

    def per_s(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    def ms(values, fn) -> float:
        return fn(values) * 1e3 if values else 0.0

    return ServeMetrics(
        duration_s=duration, completed=len(done), total_input_tokens=in_tokens, total_output_tokens=out_tokens,
        request_throughput=per_s(len(done)), output_throughput=per_s(out_tokens),
        total_token_throughput=per_s(in_tokens + out_tokens), max_output_tokens_per_s=peak,
        mean_ttft_ms=ms(ttfts, statistics.fmean), median_ttft_ms=ms(ttfts, statistics.median),
        p99_ttft_ms=ms(ttfts, lambda v: percentile(v, 99)), mean_tpot_ms=ms(tpots, statistics.fmean),
        median_tpot_ms=ms(tpots, statistics.median), mean_itl_ms=ms(itls, statistics.fmean),
        mean_e2el_ms=ms(lats, statistics.fmean))
