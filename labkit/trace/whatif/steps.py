"""Step times for the what-if: measured or replayed, and the idle a change can close."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from labkit.trace.analysis.host.steps import between_steps as step_gaps
from labkit.trace.whatif.dependency_graph import Graph, Records
from labkit.trace.whatif.replay import Replay

__all__ = ["step_median_us", "device_idle_intervals", "between_steps"]


def _step_of_ops(g: Graph, steps: list) -> dict:
    """Op index -> step index, by when its launch call started (measured)."""
    starts = [s.start for _, s in steps]
    out = {}
    for i, (key, lt) in g.launch_of.items():
        j = bisect_right(starts, lt) - 1
        if j >= 0 and lt < steps[j][1].end:
            out[i] = j
    return out


def _windows(g: Graph, steps: list, rep: Replay | None, step_of: dict, gone=frozenset()):
    """Per step (measured, or replayed with ``rep``) durations and the whole window (us).

    A step completes when its host span has ended and the device has finished the work launched
    in it; a step's time runs from the previous step's completion (the first: from its start), so
    a host that runs ahead of the device cannot hide the device's pace."""
    rec = g.rec
    ends = np.array([o.end for o in rec.ops]) if rep is None else rep.end
    if steps:
        if rep is None:
            host = [(s.start, s.end) for _, s in steps]
        else:
            host = [(rep.host_time(k, s.start), rep.host_time(k, s.end)) for k, s in steps]
        done = [z for _, z in host]
        for i, j in step_of.items():
            if i not in gone:
                done[j] = max(done[j], float(ends[i]))
        times, prev = [], host[0][0]
        for c in done:
            c = max(c, prev)
            times.append(c - prev)
            prev = c
        return times, (host[0][0], prev)
    firsts = [sp[0].start for sp in rec.threads.values() if sp] + [o.start for o in rec.ops]
    lo = min(firsts) if firsts else 0.0
    if rep is None:
        hi = max([max(s.end for s in sp) for sp in rec.threads.values() if sp] + [o.end for o in rec.ops] or [lo])
    else:
        hi = max([rep.host_end()] + ([float(rep.end.max())] if len(rep.end) else []))
    return [hi - lo], (lo, hi)


def device_idle_intervals(rec: Records, win) -> list:
    """Measured device idle inside the window ``win``: ``[(start, end)]`` with no device op running (us)."""
    lo, hi = win
    iv = sorted((max(o.start, lo), min(o.end, hi)) for o in rec.ops if o.end > lo and o.start < hi)
    out, t = [], lo
    for a, z in iv:
        if a > t:
            out.append((t, a))
        t = max(t, z)
    if rec.ops and t < hi:
        out.append((t, hi))
    return out


def step_median_us(g: Graph, step_spans: list, rep: Replay, step_of: dict) -> float:
    """The median replayed step time (us) of ``rep``."""
    times, _ = _windows(g, step_spans, rep, step_of, rep.drops.ops)
    return float(np.median(times))


def between_steps(step_spans: list, win) -> list:
    """The host time between steps inside the window ``win``: ``[(start, end)]`` from each step span's end to
    the next one's start on its thread (a host-only trace's stand-in for device idle), sorted."""
    lo, hi = win
    gaps = step_gaps([k for k, _ in step_spans], [s.start for _, s in step_spans],
                                    [s.end for _, s in step_spans])
    return sorted((max(a, lo), min(b, hi)) for _, a, b in gaps if min(b, hi) > max(a, lo))
