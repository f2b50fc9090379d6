"""#40143's published benchmark table and what its own arithmetic says about the run.

Gemma-4-E4B, 128 requests at concurrency 128, 32 images of 1024x1536 each, 8,000 output tokens
(``--ignore-eos``), ``vllm bench serve``: the figures of the PR's description, before and after.
:func:`two_phases` derives from them alone the run's two phases (an arrival phase of few, long
steps; then full-batch decode), a test checks it by hand. docs/serve-sim.md reads the table.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Published", "PR40143", "ARMS", "METRICS", "two_phases"]

#: the lab's A/B arm -> side of the published table
ARMS = {"baseline": "before", "pr40143": "after"}
#: the table's metrics the lab predicts, with their units
METRICS = {"peak_output_tok_s": "tok/s", "output_tok_s": "tok/s", "mean_tpot_ms": "ms", "mean_ttft_s": "s",
           "duration_s": "s"}


@dataclass(frozen=True)
class Published:
    """One side of the table."""

    output_tok_s: float
    peak_output_tok_s: float
    mean_tpot_ms: float
    mean_ttft_s: float
    duration_s: float

    def get(self, metric: str) -> float:
        return float(getattr(self, metric))


@dataclass(frozen=True)
class _Table:
    name: str
    requests: int
    images: int
    image_size: str
    output_tokens: int
    before: Published
    after: Published

    def side(self, arm: str) -> Published:
        """The published side of a lab arm (``baseline`` -> before, ``pr40143`` -> after)."""
        return self.before if ARMS.get(arm, arm) == "before" else self.after

    @property
    def throughput_gain(self) -> float:
        return self.after.output_tok_s / self.before.output_tok_s


PR40143 = _Table(
    name="vllm#40143 Gemma-4-E4B c=128 x 32 images", requests=128, images=32, image_size="1024x1536",
    output_tokens=8000,
    before=Published(output_tok_s=2478.5, peak_output_tok_s=6158.0, mean_tpot_ms=33.81, mean_ttft_s=137.9,
                     duration_s=413.16),
    after=Published(output_tok_s=3146.8, peak_output_tok_s=9088.0, mean_tpot_ms=24.58, mean_ttft_s=124.3,
                    duration_s=325.41),
)


def two_phases(side: Published, requests: int = PR40143.requests, output_tokens: int = PR40143.output_tokens) -> dict:
    """What one side's figures say about its run, by arithmetic alone.

    ``output_tokens_total``: tok/s x duration (= requests x output tokens when the figures hold);
    ``mean_e2el_s``: mean TTFT + (output tokens - 1) x mean TPOT; ``finish_spread_s``: duration
    less the mean E2EL (how long before the last request the average one finished);
    ``fastest_step_ms``: one full-batch step at the peak (requests / peak tok/s);
    ``spread_steps``: the finish spread in such steps (the average request got its first token
    about that many steps before the last one did, each running request decoding one token a
    step); ``arrival_s``: the arrival phase, up to the average first token (= mean TTFT);
    ``decode_s``: the rest of the run; ``decode_step_ms``: its mean step (= mean TPOT up to the
    spread).
    """
    e2el = side.mean_ttft_s + (output_tokens - 1) * side.mean_tpot_ms / 1e3
    spread = side.duration_s - e2el
    fastest = requests / side.peak_output_tok_s * 1e3
    decode = side.duration_s - side.mean_ttft_s
    return {"output_tokens_total": side.output_tok_s * side.duration_s, "mean_e2el_s": e2el, "finish_spread_s": spread,
            "fastest_step_ms": fastest, "spread_steps": spread / fastest * 1e3, "arrival_s": side.mean_ttft_s,
            "decode_s": decode, "decode_step_ms": (decode - spread) / (output_tokens - 1) * 1e3}
