"""The changes a what-if replays (``scale``, ``unsync``, ``drop_copies``) and the work each one touches.

The rules: docs/trace-analyzer.md ("labkit whatif").
"""

from __future__ import annotations

import difflib
import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from labkit.errors import UsageError

KINDS = ("scale", "unsync", "drop_copies")


@dataclass(frozen=True)
class Change:
    """One what-if change (docs/reference.md): ``kind``, the span/call regex ``pattern``,
    ``factor`` (``scale``) and ``keep`` (``drop_copies``: copies kept per step)."""

    kind: str
    pattern: str
    factor: float = 1.0
    keep: int = 0

    def describe(self) -> str:
        if self.kind == "scale":
            return f"scale {self.pattern!r} x {self.factor:g}"
        if self.kind == "drop_copies":
            return f"drop the pageable copies in {self.pattern!r} (keep {self.keep} per step)"
        return f"unsync {self.pattern!r}"

    def argument(self) -> str:
        """The command-line option that makes this change (shell-quoted)."""
        if self.kind == "scale":
            return f"--scale {_quote(f'{self.pattern}={self.factor:.4g}')}"
        if self.kind == "drop_copies":
            return f"--drop-copies {_quote(f'{self.pattern}={self.keep}')}"
        return f"--unsync {_quote(self.pattern)}"


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def parse_changes(scale: list[str] | None = None, unsync: list[str] | None = None,
                  drop_copies: list[str] | None = None) -> list[Change]:
    """``NAME=FACTOR``, ``NAME`` and ``NAME[=KEEP]`` strings -> ``Change`` list (``UsageError`` on bad input)."""
    out = []
    for item in scale or []:
        name, sep, fac = item.rpartition("=")
        if not sep or not name:
            raise UsageError(f"--scale needs NAME=FACTOR, got {item!r}")
        try:
            f = float(fac)
        except ValueError:
            raise UsageError(f"--scale {item!r}: factor {fac!r} is not a number") from None
        if not math.isfinite(f) or f < 0:
            raise UsageError(f"--scale {item!r}: factor must be a finite number >= 0")
        out.append(Change("scale", _regex(name, "--scale"), f))
    for name in unsync or []:
        out.append(Change("unsync", _regex(name, "--unsync")))
    for item in drop_copies or []:
        name, keep = item, 0
        head, sep, tail = item.rpartition("=")
        if sep and tail.isdigit() and head:
            name, keep = head, int(tail)
        elif sep and head and not tail.isdigit() and re.fullmatch(r"-?\d+(\.\d*)?", tail):
            raise UsageError(f"--drop-copies {item!r}: KEEP must be a whole number >= 0")
        out.append(Change("drop_copies", _regex(name, "--drop-copies"), keep=keep))
    return out


def _regex(pattern: str, what: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"{what} {pattern!r} is not a valid regex: {exc}") from None
    return pattern


def closest_names(pattern: str, names) -> str:
    plain = re.sub(r"[\^\$\\\[\]\(\)\*\+\?\{\}\|]", "", pattern)
    names = sorted(set(names))
    hits = difflib.get_close_matches(plain, names, n=5, cutoff=0.3)
    if not hits:
        low = plain.lower()
        hits = [n for n in names if low and (low in n.lower() or n.lower() in low)][:5]
    if not hits:
        hits = names[:5]
        return ("none close; present: " + ", ".join(repr(h) for h in hits)) if hits else "none present"
    return ", ".join(repr(h) for h in hits)


# -- dropping copies ------------------------------------------------------------------------------
def is_pageable_h2d(op_name: str) -> bool:
    return "HtoD" in op_name and "Pageable" in op_name


@dataclass
class CopyDrops:
    """What the ``drop_copies`` changes remove (times in us)."""

    ops: set = field(default_factory=set)  #: device op indices removed (copies and the builds' ops)
    copies: set = field(default_factory=set)  #: of ``ops``, the copies themselves
    scaled: dict = field(default_factory=dict)  #: thread key -> [(factor, [(span start, span end)])]
    unsync: dict = field(default_factory=dict)  #: thread key -> indices (in ``Graph.syncs[key]``) no longer waiting
    matched: dict = field(default_factory=dict)  #: change pattern -> copies inside matching spans
    per_copy_us: dict = field(default_factory=dict)  #: change pattern -> median per-copy host work
    pad_us: dict = field(default_factory=dict)  #: change pattern -> median host work of a removed pad (0: none)


class HostWork:
    """Host work between two times on a thread: elapsed time minus what its sync calls waited."""

    def __init__(self, syncs: list) -> None:
        self.starts = [c.start for c in syncs]
        self.cum = np.cumsum([0.0] + [(c.end - c.start) - c.cost for c in syncs]).tolist()

    def work(self, a: float, z: float) -> float:
        lo, hi = bisect_right(self.starts, a - 1e-9), bisect_right(self.starts, z - 1e-9)
        return max(0.0, (z - a) - (self.cum[hi] - self.cum[lo]))


def _innermost(spans: list, starts: list, t: float):
    """Index of the innermost span of ``spans`` (sorted by start) containing ``t``, or None."""
    for k in range(bisect_right(starts, t) - 1, -1, -1):
        if spans[k].end >= t:
            return k
    return None


#: the nested-tensor pad that ends the pre-#38794 per-layer build (``to_padded_tensor(0)``)
NESTED_PAD = re.compile(r"^aten::to_padded_tensor$")


def _children(spans: list, starts: list, span) -> list:
    """The spans directly inside ``span`` on its thread (``spans`` sorted by start), in order."""
    out = []
    end = -math.inf
    for k in range(bisect_right(starts, span.start), len(spans)):
        s = spans[k]
        if s.start > span.end:
            break
        if s is span or s.start < end or s.end > span.end:
            continue
        out.append(s)
        end = s.end
    return out


def _pad_after(spans: list, starts: list, span, last_copy: float):
    """``(start, end)`` of the nested pad that follows the span's last copy; None when no pad follows."""
    kids = _children(spans, starts, span)
    holder = next((c for c in kids if c.start <= last_copy <= c.end), None)
    a = holder.end if holder is not None else last_copy
    lo, hi = bisect_right(starts, a), bisect_right(starts, span.end)
    pads = [s for s in spans[lo:hi] if NESTED_PAD.match(s.name) and s.end <= span.end]
    if not pads:
        return None
    pad = pads[-1]
    nxt = next((c for c in kids if c.start >= pad.end), None)
    return a, (nxt.start if nxt is not None else span.end)


def plan_copy_drops(g, changes, steps) -> CopyDrops:
    """Which ops, waits and host work the ``drop_copies`` changes among ``changes`` remove (see
    docs/reference.md); ``steps`` are the ``(thread key, Span)`` step spans (keep counts per step)."""
    out = CopyDrops()
    drops = [c for c in changes if c.kind == "drop_copies"]
    if not drops:
        return out
    ops = g.rec.ops
    step_starts = [s.start for _, s in steps]
    launches: dict = {}  # thread key -> sorted [(launch time, op index)]
    for i, (key, lt) in g.launch_of.items():
        launches.setdefault(key, []).append((lt, i))
    for v in launches.values():
        v.sort()
    for ch in drops:
        rx = re.compile(ch.pattern)
        cand = {key: [s for s in spans if s.corr < 0 and rx.search(s.name)] for key, spans in g.rec.threads.items()}
        cand_starts = {key: [s.start for s in v] for key, v in cand.items()}
        by_span: dict = {}  # (thread key, span index) -> [(launch time, op index)]
        for i, op in enumerate(ops):
            if not is_pageable_h2d(op.name) or i not in g.launch_of:
                continue
            key, lt = g.launch_of[i]
            k = _innermost(cand.get(key, []), cand_starts.get(key, []), lt)
            if k is not None:
                by_span.setdefault((key, k), []).append((lt, i))
        copies = sorted((lt, i, sk) for sk, v in by_span.items() for lt, i in v)
        out.matched[ch.pattern] = len(copies)
        kept_in_step: dict = {}
        dropped = set()
        for lt, i, _ in copies:
            j = bisect_right(step_starts, lt) - 1
            step = j if j >= 0 and lt < steps[j][1].end else None
            if kept_in_step.get(step, 0) < ch.keep:
                kept_in_step[step] = kept_in_step.get(step, 0) + 1
            else:
                dropped.add(i)
        waits = {key: HostWork(g.syncs.get(key, [])) for key in cand}
        per_copy = {}
        for (key, k), v in by_span.items():
            v.sort()
            if len(v) >= 2:
                per_copy[(key, k)] = waits[key].work(v[0][0], v[-1][0]) / (len(v) - 1)
        typical = float(np.median(list(per_copy.values()))) if per_copy else 0.0
        out.per_copy_us[ch.pattern] = typical
        thread_starts = {key: [s.start for s in g.rec.threads[key]] for key, _ in by_span}
        pads = []
        for (key, k), v in by_span.items():
            span = cand[key][k]
            removed = [idx for idx, (_, i) in enumerate(v) if i in dropped]
            if not removed:
                continue
            whole = waits[key].work(span.start, span.end)
            c = per_copy.get((key, k), typical)
            gone = len(removed) * c
            # the calls after a removed copy, up to the next copy (or the span's end), stop waiting
            quiet = [(v[idx][0], v[idx + 1][0] if idx + 1 < len(v) else span.end) for idx in removed]
            pad = _pad_after(g.rec.threads[key], thread_starts[key], span, v[-1][0]) \
                if len(removed) == len(v) else None
            if pad is not None:  # the whole build goes: the pad, and every op launched while it ran
                pad_work = waits[key].work(*pad)
                gone += pad_work
                pads.append(pad_work)
                lo = bisect_right(launches[key], (v[0][0], -1))
                hi = bisect_right(launches[key], (pad[1], math.inf))
                out.ops.update(i for _, i in launches[key][lo:hi])
                quiet.append(pad)
            factor = max(0.0, 1.0 - gone / whole) if whole > 0 else 1.0
            out.scaled.setdefault(key, []).append((factor, [(span.start, span.end)]))
            syncs = g.syncs.get(key, [])
            s_starts = [c.start for c in syncs]
            for a, z in quiet:
                lo, hi = bisect_right(s_starts, a - 1e-9), bisect_right(s_starts, z - 1e-9)
                out.unsync.setdefault(key, set()).update(range(lo, hi))
        out.pad_us[ch.pattern] = float(np.median(pads)) if pads else 0.0
        out.ops |= dropped
        out.copies |= dropped
    return out
