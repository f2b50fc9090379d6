"""Timeline decimation: bars closer than a resolution merge, every gap at least that long survives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from labkit.viz.timeline import decimate, merge_close

DEV = "GPU 0 stream 7"
HOST = "host 1/1"


def _rows(items) -> pd.DataFrame:
    """``(lane, kind, start_ms, end_ms, label)`` -> the rows ``_lanes`` builds."""
    prio = {"host_wait": 0, "idle": 0, "kernel": 1, "gpu_memcpy": 1, "cpu_op": 2}
    return pd.DataFrame([{"lane": lane, "kind": kind, "start_ms": a, "dur_ms": b - a, "label": label,
                          "prio": prio[kind]} for lane, kind, a, b, label in items])


def _union_gaps(rows: pd.DataFrame, lane: str, min_gap: float) -> list[tuple[float, float]]:
    """Gaps of at least ``min_gap`` between the union of a lane's busy bars (reference, plain loops)."""
    spans = sorted((r.start_ms, r.start_ms + r.dur_ms) for r in rows.itertuples() if r.lane == lane and r.prio != 0)
    gaps, reach = [], None
    for a, b in spans:
        if reach is not None and a - reach >= min_gap:
            gaps.append((round(reach, 9), round(a, 9)))
        reach = b if reach is None else max(reach, b)
    return gaps


# A hand-worked device lane, resolution 10 us (0.010 ms):
#   kernels A 0-10 us, B 12-20 (2 us after A: merges), C 50-60 (30 us gap: kept),
#   memcpy D 61-70 (another kind: its own bar), kernel E 71-80 (11 us after C: kept apart),
#   kernel F 200-210 (120 us gap: kept).
HAND = [
    (DEV, "kernel", 0.000, 0.010, "A"),
    (DEV, "kernel", 0.012, 0.020, "B"),
    (DEV, "kernel", 0.050, 0.060, "C"),
    (DEV, "gpu_memcpy", 0.061, 0.070, "D"),
    (DEV, "kernel", 0.071, 0.080, "E"),
    (DEV, "kernel", 0.200, 0.210, "F"),
]


def test_merge_close_hand_worked_lane():
    out = merge_close(_rows(HAND), 0.010).sort_values("start_ms").reset_index(drop=True)
    spans = [(r.kind, round(r.start_ms, 6), round(r.start_ms + r.dur_ms, 6), r.n) for r in out.itertuples()]
    assert spans == [("kernel", 0.0, 0.02, 2), ("kernel", 0.05, 0.06, 1), ("gpu_memcpy", 0.061, 0.07, 1),
                     ("kernel", 0.071, 0.08, 1), ("kernel", 0.2, 0.21, 1)]
    ab = out.iloc[0]
    assert ab["busy_frac"] == pytest.approx(0.018 / 0.020)  # 10 us + 8 us busy over a 20 us span
    assert ab["label"] == "2 ops merged (90% of the span); longest: A"
    assert out.iloc[1]["label"] == "C" and out.iloc[1]["busy_frac"] == 1.0
    # the gaps of at least 10 us, by hand: 20-50 us and 80-200 us; both survive exactly
    assert _union_gaps(out, DEV, 0.010) == [(0.02, 0.05), (0.08, 0.2)] == _union_gaps(_rows(HAND), DEV, 0.010)


def test_merge_close_chains_nested_and_overlapping_host_ops():
    rows = _rows([(HOST, "cpu_op", 0.0, 0.100, "outer"), (HOST, "cpu_op", 0.010, 0.020, "inner"),
                  (HOST, "cpu_op", 0.105, 0.200, "next"), (HOST, "cpu_op", 0.300, 0.310, "late")])
    out = merge_close(rows, 0.010).sort_values("start_ms").reset_index(drop=True)
    assert list(out["n"]) == [3, 1]
    # the inner op ends at 20 us but the outer one reaches 100 us: "next" starts 5 us after that
    assert out.loc[0, "start_ms"] == 0.0 and out.loc[0, "dur_ms"] == pytest.approx(0.200)
    assert out.loc[0, "busy_frac"] == 1.0  # 205 us of (nested) ops over 200 us: capped at 1
    assert "longest: outer" in out.loc[0, "label"]


@pytest.mark.parametrize("seed", range(5))
def test_every_gap_at_least_the_resolution_survives(seed):
    rng = np.random.default_rng(seed)
    items = []
    for lane in (DEV, "GPU 0 stream 8", HOST):
        kinds = ("cpu_op",) if lane == HOST else ("kernel", "gpu_memcpy")
        t = 0.0
        for _ in range(400):
            t += float(rng.choice([0.0005, 0.003, 0.02, 0.4]) * rng.random())
            d = float(rng.exponential(0.01))
            items.append((lane, str(rng.choice(kinds)), t, t + d, f"op{len(items)}"))
    rows = _rows(items)
    for res in (0.002, 0.010, 0.050):
        out = merge_close(rows, res)
        assert len(out) < len(rows)
        for lane in (DEV, "GPU 0 stream 8", HOST):
            assert _union_gaps(out, lane, res) == _union_gaps(rows, lane, res), (lane, res)
        assert out["n"].sum() == len(rows)


def test_decimate_keeps_long_idle_gaps_and_fits():
    busy = [(DEV, "kernel", 0.001 * i, 0.001 * i + 0.0008, f"k{i}") for i in range(1000)]
    gaps = [(DEV, "host_wait", 0.001 * i + 0.0008, 0.001 * (i + 1), "short") for i in range(999)]
    long_gap = (DEV, "host_wait", 1.0, 1.5, "host_wait: the long one")
    rows = _rows(busy + gaps + [long_gap, (DEV, "kernel", 1.5, 1.6, "after")])
    out, res = decimate(rows, 50, max_gap_ms=0.1)
    assert 0 < res <= 0.1 and len(out) <= 50
    kept = out[out["label"] == "host_wait: the long one"]
    assert len(kept) == 1 and kept.iloc[0]["start_ms"] == 1.0 and kept.iloc[0]["dur_ms"] == 0.5
    # the 0.2 us gaps merged into idle bars covering the busy stretch: drawn, at 20% opacity share
    merged_idle = out[(out["kind"] == "host_wait") & (out["n"] > 1)]
    assert len(merged_idle) >= 1 and (merged_idle["busy_frac"] < 0.5).all()
    assert _union_gaps(out, DEV, res) == _union_gaps(rows, DEV, res)
    same, zero = decimate(rows, 10_000, max_gap_ms=0.1)
    assert zero == 0.0 and len(same) == len(rows)  # under the budget nothing merges


def test_recorded_h200_timeline_draws_every_long_host_wait_gap():
    """The measured #38794 per_layer trace (165k bars): every idle gap of at least the resolution is drawn."""
    from labkit.engine.recorded import analyze_recorded
    from labkit.viz.timeline import MAX_EVENTS, _lanes, max_resolution_ms, plot_timeline

    measured = analyze_recorded("h200")
    if "fast/cursor/per_layer/async" not in measured:
        pytest.skip("no recorded H200 per_layer trace")
    an = measured["fast/cursor/per_layer/async"]
    _, rows = _lanes(an)
    _, res = decimate(rows, MAX_EVENTS, max_resolution_ms(an))
    assert 0 < res <= max_resolution_ms(an)
    fig = plot_timeline(an)
    assert sum(len(t.x) for t in fig.data) <= MAX_EVENTS
    drawn = {(b, x) for t in fig.data if t.name == "idle: host wait"
             for b, x in zip(np.round(np.asarray(t.base, float), 6), np.round(np.asarray(t.x, float), 6))}
    wanted = rows[(rows["kind"] == "host_wait") & (rows["dur_ms"] >= res)]
    assert len(wanted) > 0
    missing = [(a, d) for a, d in zip(np.round(wanted["start_ms"].to_numpy(float), 6),
                                      np.round(wanted["dur_ms"].to_numpy(float), 6)) if (a, d) not in drawn]
    assert not missing
    for lane in {r for r in rows["lane"] if r.startswith("GPU")}:
        sub = pd.DataFrame([{"lane": lane, "start_ms": b, "dur_ms": x, "prio": 1} for t in fig.data
                            if not t.name.startswith("idle") for yy, b, x in zip(t.y, t.base, t.x) if yy == lane])
        assert _union_gaps(sub, lane, res) == _union_gaps(rows, lane, res)


def test_timeline_subtitle_says_how_bars_were_reduced():
    from labkit.viz.timeline import _subtitle

    assert _subtitle(100, 100, 100, 0.0) == ""
    assert "merged at 64 us: every gap of at least that is drawn" in _subtitle(9000, 5000, 5000, 0.064)
    assert _subtitle(9000, 8000, 6000, 0.5).endswith("(merged at 500 us: every gap of at least that is drawn; "
                                                     "then the 6000 longest of 8000 kept)</sup>")
    assert "(the 100 longest of 500 kept)" in _subtitle(500, 500, 100, 0.0)
