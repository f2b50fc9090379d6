"""The scheduler's placeholder reads in a trace (the #40143 pattern) and the what-if that removes them.

The two shapes and the cost per read: docs/trace-analyzer.md ("labkit whatif").
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np

from labkit.errors import UsageError
from labkit.trace.analysis.host.steps import find_step_spans
from labkit.trace.read.load import as_trace
from labkit.trace.whatif.changes import Change, HostWork
from labkit.trace.whatif.dependency_graph import Graph, trace_graph

#: frame names of the reads (``name`` or ``Class.name`` or ``file(line): name``), and reads per call
READ_CALLS = {"get_num_embeds": 1, "get_embeds_indices_in_range": 2}
FRAME = re.compile(r"(?:^|[.\s])(" + "|".join(READ_CALLS) + r")$")
#: a tensor read's ``int()`` in a torch.profiler trace, and the spans the lab's engine makes them in
OP_READ = re.compile(r"^aten::item$")
SCHEDULE = r"^schedule$"

__all__ = ["PlaceholderReads", "find_placeholder_reads", "read_cost_ns"]


@dataclass(frozen=True)
class PlaceholderReads:
    """The placeholder reads of one trace (times: ``_ns`` per read, ``_ms`` per step)."""

    kind: str  #: ``"frames"`` or ``"ops"`` (docs/reference.md)
    pattern: str  #: the spans the removing change scales
    reads_per_step: tuple  #: reads in each step (steps as ``labkit whatif`` times them)
    read_ns: float  #: what one read costs in this trace
    host_ms_per_step: float  #: median host time the reads take per step
    change: Change  #: the change that removes them

    @property
    def argument(self) -> str:
        return self.change.argument()

    def to_json(self) -> dict:
        return {"kind": self.kind, "pattern": self.pattern, "reads_per_step": list(self.reads_per_step),
                "read_us": self.read_ns / 1e3, "host_ms_per_step": self.host_ms_per_step,
                "argument": self.argument}


def _step_of(ends: list, t: float) -> int | None:
    """The step a host time belongs to: the first whose end is not before it (None: after the last)."""
    j = bisect_left(ends, t)
    return j if j < len(ends) else None


def read_cost_ns(rec, within: str = SCHEDULE) -> dict:
    """The ``ops`` shape's cost per read in ``rec`` (``Records``): the median time from the start of one
    ``aten::item`` to the next inside the same ``within`` span (ns). Returns ``{"read_ns", "mean_ns",
    "gaps"}``; ``UsageError`` when no such span holds two reads."""
    rx = re.compile(within)
    per_read: list = []
    for spans in rec.threads.values():
        outer = [s for s in spans if s.corr < 0 and rx.search(s.name)]
        o_starts = [s.start for s in outer]
        last: dict = {}  # outer span index -> start of its previous read
        for s in spans:
            if not OP_READ.match(s.name):
                continue
            k = bisect_right(o_starts, s.start) - 1
            if k < 0 or s.end > outer[k].end:
                continue
            if k in last:
                per_read.append(s.start - last[k])
            last[k] = s.start
    if not per_read:
        raise UsageError(f"{rec.file}: no {within!r} span holds two placeholder reads to time")
    return {"read_ns": float(np.median(per_read)) * 1e3, "mean_ns": float(np.mean(per_read)) * 1e3,
            "gaps": len(per_read)}


def _frames(rec, ends: list):
    """Per step: reads and host time (us) of the outermost read frames; the call names seen."""
    counts, host, names = [0] * len(ends), [0.0] * len(ends), set()
    for spans in rec.threads.values():
        end = -np.inf
        for s in spans:
            m = FRAME.search(s.name) if s.corr < 0 else None
            if m is None or s.start < end:  # nested inside a read already counted
                continue
            end = s.end
            j = _step_of(ends, s.start)
            if j is not None:
                counts[j] += READ_CALLS[m.group(1)]
                host[j] += s.end - s.start
                names.add(m.group(1))
    return counts, host, names


def _op_reads(rec, ends: list, syncs: dict, within: str = SCHEDULE):
    """Per step: ``aten::item`` reads inside ``within`` spans, and those spans' host work (us: their
    time less what synchronizing calls in them waited, the quantity ``--scale`` scales)."""
    rx = re.compile(within)
    counts, work = [0] * len(ends), [0.0] * len(ends)
    for key, spans in rec.threads.items():
        outer = [s for s in spans if s.corr < 0 and rx.search(s.name)]
        o_starts = [s.start for s in outer]
        host = HostWork(syncs.get(key, []))
        for s in outer:
            j = _step_of(ends, s.start)
            if j is not None:
                work[j] += host.work(s.start, s.end)
        for s in spans:
            if not OP_READ.match(s.name):
                continue
            k = bisect_right(o_starts, s.start) - 1
            j = _step_of(ends, s.start)
            if k >= 0 and s.end <= outer[k].end and j is not None:
                counts[j] += 1
    return counts, work


def find_placeholder_reads(trace, steps: list | None = None) -> PlaceholderReads | None:
    """The placeholder reads of ``trace`` (path, ``Trace`` or the replay's ``Graph``), or None when it
    shows none.

    ``steps``: ``(thread key, Span)`` step spans (default: those ``labkit whatif`` finds). Frames are
    preferred where a trace has both shapes: they cover each read whole."""
    if isinstance(trace, Graph):
        g = trace
    else:
        _, g = trace_graph(as_trace(trace))
    rec = g.rec
    if steps is None:
        steps, _ = find_step_spans(rec)
    if not steps:
        return None
    ends = sorted(s.end for _, s in steps)
    counts, host, names = _frames(rec, ends)
    if sum(counts):
        pattern = "(" + "|".join(sorted(names)) + ")$" if len(names) > 1 else f"{next(iter(names))}$"
        busy = [h for h, n in zip(host, counts) if n]
        return PlaceholderReads("frames", pattern, tuple(counts), float(sum(host) / sum(counts)) * 1e3,
                                float(np.median(busy)) / 1e3, Change("scale", pattern, 0.0))
    counts, work = _op_reads(rec, ends, g.syncs)
    if sum(counts) < 2:
        return None
    read_ns = read_cost_ns(rec)["read_ns"]
    reads = float(np.median(counts))
    spent = float(np.median([w for w, n in zip(work, counts) if n]))
    factor = max(0.0, 1.0 - reads * read_ns / 1e3 / spent) if spent > 0 else 1.0
    return PlaceholderReads("ops", SCHEDULE, tuple(counts), read_ns, min(spent, reads * read_ns / 1e3) / 1e3,
                            Change("scale", SCHEDULE, factor))
