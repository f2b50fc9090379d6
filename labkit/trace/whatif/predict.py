"""What would a cheaper host call, a copy that does not synchronize or one not made buy? (``labkit whatif``)

How: docs/trace-analyzer.md ("labkit whatif"); the JSON: docs/analyze-json.md.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from labkit.errors import UsageError
from labkit.results import labkit_commit
from labkit.trace.analysis.host.engine_steps import _union_inside
from labkit.trace.analysis.host.steps import find_step_spans
from labkit.trace.analysis.trace import _clean
from labkit.trace.outputs import _num as _f
from labkit.trace.read.load import as_trace
from labkit.trace.whatif.changes import Change, closest_names, is_pageable_h2d, parse_changes, plan_copy_drops
from labkit.trace.whatif.dependency_graph import Graph, Records, trace_graph, trace_records
from labkit.trace.whatif.replay import Replay, replay
from labkit.trace.whatif.steps import _step_of_ops, _windows, device_idle_intervals, step_median_us
from labkit.trace.whatif.suggest import suggest as make_suggestions
from labkit.trace.whatif.suggest import suggestion_lines

logger = logging.getLogger(__name__)

SCHEMA = 1
#: the unchanged replay must reproduce every measured step within this fraction
REPLAY_TOLERANCE = 0.02
#: device gaps at least this long (us) count as bubbles; one that shrinks below it has closed
GAP_MIN_US = 10.0
_TOKENS = re.compile(r"execute_context_\d+\((\d+)\)_generation_\d+\((\d+)\)")

__all__ = ["Change", "WhatIf", "parse_changes", "predict"]


@dataclass
class WhatIf:
    """Measured vs predicted for one trace and a list of changes (see ``to_json`` for the fields)."""

    source: dict
    steps: dict
    measured: dict
    predicted: dict
    changes: list
    replay_check: dict
    gaps: dict
    assumptions: dict
    notes: list = field(default_factory=list)
    suggestions: dict | None = None  #: ``labkit.trace.whatif.suggest`` lists (``suggest=True``)

    @property
    def speedup(self) -> float | None:
        m, p = self.measured["step_ms_median"], self.predicted["step_ms_median"]
        return m / p if m and p else None

    def to_json(self) -> dict:
        """``{"measured": {"step_ms_median", "device_idle_frac", ...}, "predicted": {...}, "changes": [...],
        "replay_check": {"step_ms_error", ...}, ...}`` (stable keys)."""
        out = {"schema": SCHEMA, "source": self.source, "steps": self.steps, "measured": self.measured,
               "predicted": self.predicted, "speedup": self.speedup, "changes": self.changes,
               "replay_check": self.replay_check, "gaps": self.gaps, "assumptions": self.assumptions,
               "notes": self.notes}
        if self.suggestions is not None:
            out["suggestions"] = self.suggestions
        return _clean(out)

    @property
    def warnings(self) -> list[str]:
        """One line per change that matches nothing that matters (also in ``changes[i]["warning"]``)."""
        return [c["warning"] for c in self.changes if c.get("warning")]

    def summary_lines(self) -> list[str]:
        s, m, p, rc = self.source, self.measured, self.predicted, self.replay_check
        out = [f"trace: {s['file']}  ({s['kind']}; GPU: {s.get('gpu') or 'none recorded'})",
               f"steps: {self.steps['count']} x {self.steps['what']}"]
        for c in self.changes:
            out.append(f"change: {c['describe']}  ({c['matched']} matched)")
        if not self.changes:
            out.append("change: none (replay only)")
        out.append(f"{'':24s} {'measured':>10s} {'predicted':>10s}")
        out.append(f"{'step ms (median)':24s} {_f(m['step_ms_median']):>10s} {_f(p['step_ms_median']):>10s}")
        if m.get("tokens_per_s") is not None:
            out.append(f"{'tokens/s':24s} {_f(m['tokens_per_s'], 0):>10s} {_f(p['tokens_per_s'], 0):>10s}")
        out.append(f"{'device idle fraction':24s} {_f(m['device_idle_frac'])  :>10s} {_f(p['device_idle_frac']):>10s}")
        for ms, ps in zip(m["streams"], p["streams"]):
            out.append(f"  stream {ms['device']}/{ms['stream']}: busy {ms['busy_ms']:.3f} ms, idle "
                       f"{ms['idle_ms']:.3f} -> {ps['idle_ms']:.3f} ms")
        g = self.gaps
        out.append(f"gaps >= {g['threshold_us']:g} us: {g['measured_count']} measured "
                   f"({g['measured_us'] / 1e3:.3f} ms, shrinking by {g['shrunk_us'] / 1e3:.3f} ms), "
                   f"{g['closed_count']} close ({g['closed_us'] / 1e3:.3f} ms), "
                   f"{g['remaining_count']} remain ({g['remaining_us'] / 1e3:.3f} ms)")
        for r in g["largest_remaining"][:5]:
            out.append(f"  remains {r['predicted_us']:9.1f} us before {r['next_op'][:40]}  "
                       f"(launched in {r['launched_in']})")
        ok = "ok" if rc["ok"] else "FAILED"
        out.append(f"self-check: unchanged replay reproduces the measured steps within "
                   f"{100 * rc['step_ms_error']:.2f}% (tolerance {100 * rc['tolerance']:.0f}%): {ok}")
        for n in self.notes:
            out.append(f"note: {n}")
        if self.suggestions is not None:
            out.extend(suggestion_lines(self.suggestions))
        return out


def _metrics(rec: Records, steps: list, starts, ends, win, step_times: list, tokens, gone=frozenset()) -> dict:
    lo, hi = win
    length = hi - lo
    streams = []
    by: dict = {}
    for i, o in enumerate(rec.ops):
        if i not in gone:
            by.setdefault(o.stream, []).append(i)
    for st, idx in by.items():
        busy, _ = _union_inside(starts[idx], ends[idx], lo, hi)
        streams.append({"device": st[0], "stream": st[1], "ops_count": len(idx), "busy_ms": busy / 1e3,
                        "idle_ms": max(0.0, length - busy) / 1e3,
                        "idle_frac": (1 - busy / length) if length > 0 else None})
    med = float(np.median(step_times)) if step_times else None
    alive = [i for idx in by.values() for i in idx]
    busy_all, _ = _union_inside(starts[alive], ends[alive], lo, hi)
    return {"step_ms_median": med / 1e3 if med is not None else None,
            "step_ms": [t / 1e3 for t in step_times],
            "device_idle_frac": (1 - busy_all / length) if len(rec.ops) > len(gone) and length > 0 else None,
            "device_busy_ms": busy_all / 1e3, "window_ms": length / 1e3,
            "tokens_per_s": (float(np.median(tokens)) / (med / 1e6)) if tokens and med else None,
            "streams": streams}


def _steady(times: list, win: tuple) -> tuple:
    """The window device idle is measured over: from the first step's completion on (three steps or more)."""
    return (win[0] + times[0], win[1]) if len(times) >= 3 else win


def _gaps(rec: Records, pred: Replay, win_m, launched_in) -> dict:
    rows = []
    prev: dict = {}
    for i, o in enumerate(rec.ops):
        if i in pred.drops.ops:  # removed by the change: the gaps around it are one gap
            continue
        p = prev.get(o.stream)
        prev[o.stream] = i
        if p is None or not (win_m[0] <= o.start <= win_m[1]):
            continue
        m = o.start - rec.ops[p].end
        q = pred.start[i] - pred.end[p]
        if m >= GAP_MIN_US or q >= GAP_MIN_US:
            rows.append((m, q, i))
    closed = [(m, q) for m, q, _ in rows if m >= GAP_MIN_US and q < GAP_MIN_US]
    remain = sorted((r for r in rows if r[1] >= GAP_MIN_US), key=lambda r: -r[1])
    return {"threshold_us": GAP_MIN_US,
            "measured_count": sum(1 for m, _, _ in rows if m >= GAP_MIN_US),
            "measured_us": sum(m for m, _, _ in rows if m >= GAP_MIN_US),
            "closed_count": len(closed), "closed_us": sum(m for m, _ in closed),
            "shrunk_us": sum(max(0.0, m - q) for m, q, _ in rows if m >= GAP_MIN_US),
            "remaining_count": len(remain), "remaining_us": sum(q for _, q, _ in remain),
            "largest_remaining": [{"stream": list(rec.ops[i].stream), "measured_us": m, "predicted_us": q,
                                   "next_op": rec.ops[i].name, "launched_in": launched_in(i)}
                                  for m, q, i in remain[:10]]}


def _launched_in(g: Graph):
    starts: dict = {}  # thread key -> its spans' starts (the spans are sorted by start)

    def f(i: int) -> str:
        li = g.launch_of.get(i)
        if li is None:
            return "no launch call in trace"
        spans = g.rec.threads[li[0]]
        if li[0] not in starts:
            starts[li[0]] = [s.start for s in spans]
        t = li[1]
        # the last span (in start order) around the launch: walk back from the last one starting by then
        for k in range(bisect_right(starts[li[0]], t) - 1, -1, -1):
            s = spans[k]
            if s.corr < 0 and s.end >= t:
                return s.name
        return "(top level)"
    return f


# -- the facade -------------------------------------------------------------------------------------
#: a change that moves the predicted median step by less than this fraction is reported as not mattering
NO_EFFECT_FRAC = 0.01


def _check_changes(g: Graph, changes: list[Change], step_spans: list) -> list[dict]:
    """One entry per change: what it matches (``UsageError`` when nothing)."""
    names = {s.name for spans in g.rec.threads.values() for s in spans}
    sync_names = {c.name for calls in g.syncs.values() for c in calls}
    out = []
    for ch in changes:
        rx = re.compile(ch.pattern)
        if ch.kind == "scale":
            n = sum(1 for spans in g.rec.threads.values() for s in spans if rx.search(s.name))
            if not n:
                raise UsageError(f"--scale {ch.pattern!r} matches no host span; closest: "
                                 f"{closest_names(ch.pattern, names)}")
        elif ch.kind == "drop_copies":
            n = plan_copy_drops(g, [ch], step_spans).matched[ch.pattern]
            if not n:
                raise UsageError(f"--drop-copies {ch.pattern!r} matches no host span with pageable host-to-device "
                                 f"copies inside; closest: {closest_names(ch.pattern, _copy_span_names(g))}")
        else:
            n = sum(1 for calls in g.syncs.values() for c in calls if any(rx.search(x) for x in c.labels))
            if not n:
                raise UsageError(f"--unsync {ch.pattern!r} matches no synchronizing call; closest: "
                                 f"{closest_names(ch.pattern, sync_names)}")
        out.append({"kind": ch.kind, "pattern": ch.pattern, "factor": ch.factor if ch.kind == "scale" else None,
                    "keep": ch.keep if ch.kind == "drop_copies" else None, "matched": n,
                    "describe": ch.describe(), "argument": ch.argument(), "warning": None})
    return out


def _copy_span_names(g: Graph) -> set:
    """Names of the annotations around pageable host-to-device copy calls (for 'closest' hints)."""
    out = set()
    for i, op in enumerate(g.rec.ops):
        if is_pageable_h2d(op.name) and i in g.launch_of:
            key, lt = g.launch_of[i]
            out.update(s.name for s in g.rec.threads[key] if s.corr < 0 and s.start <= lt <= s.end)
    return out


def idle_overlap_us(rec: Records, idle: list, pattern: str) -> float:
    """Device idle (``device_idle_intervals``) overlapped by the host spans matching ``pattern`` (each
    idle moment counted once per thread)."""
    rx = re.compile(pattern)
    total = 0.0
    starts = [a for a, _ in idle]
    for spans in rec.threads.values():
        merged: list = []
        for s in spans:
            if s.corr < 0 and rx.search(s.name):
                if merged and s.start <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], s.end)
                else:
                    merged.append([s.start, s.end])
        for a, z in merged:
            k = max(0, bisect_right(starts, a) - 1)
            while k < len(idle) and idle[k][0] < z:
                total += max(0.0, min(z, idle[k][1]) - max(a, idle[k][0]))
                k += 1
    return total


def _waiting_syncs(g: Graph, exclude) -> str:
    """The synchronizing calls that waited longest in all, apart from those of ``exclude`` (a regex)."""
    rx = re.compile(exclude)
    tot: dict = {}
    for calls in g.syncs.values():
        for c in calls:
            if not any(rx.search(x) for x in c.labels):
                n, w = tot.get(c.name, (0, 0.0))
                tot[c.name] = (n + 1, w + (c.end - c.start) - c.cost)
    top = sorted(tot.items(), key=lambda kv: -kv[1][1])[:2]
    return ", ".join(f"{name!r} ({n} calls, {w / 1e3:.3f} ms waited)" for name, (n, w) in top if w > 0) or "none"


def _warn_changes(g: Graph, changes: list[Change], entries: list[dict], step_spans: list, step_of: dict,
                  base_us: float, pred: Replay, win_m) -> None:
    """Fill ``idle_overlap_us``, ``step_effect_frac`` and ``warning`` of each change that does not matter."""
    idle = device_idle_intervals(g.rec, win_m)
    for ch, e in zip(changes, entries):
        if ch.kind == "scale" and g.rec.ops:
            e["idle_overlap_us"] = idle_overlap_us(g.rec, idle, ch.pattern)
            if e["idle_overlap_us"] <= 0:
                e["warning"] = (f"--scale {ch.pattern!r} matches {e['matched']} host spans, none of which overlaps "
                                "device idle: the device was busy throughout them, so making them cheaper cannot "
                                "shorten the step")
            continue
        alone = pred if len(changes) == 1 else replay(g, [ch], step_spans)
        effect = (base_us - step_median_us(g, step_spans, alone, step_of)) / base_us if base_us > 0 else 0.0
        e["step_effect_frac"] = effect
        if abs(effect) < NO_EFFECT_FRAC and ch.kind == "scale":
            e["warning"] = (f"{ch.argument()} matches {e['matched']} host spans, but alone it moves the predicted "
                            f"step by {100 * effect:+.2f}%: they take that little of the steps' host time (or run "
                            "on a thread the steps do not wait for)")
        elif abs(effect) < NO_EFFECT_FRAC:
            what = "synchronizing calls" if ch.kind == "unsync" else "pageable copies"
            e["warning"] = (f"{ch.argument()} matches {e['matched']} {what}, but alone it moves the predicted step by "
                            f"{100 * effect:+.2f}%: the calls that still wait longest are {_waiting_syncs(g, ch.pattern)}")


def predict(path_or_trace, changes: list[Change] = (), *, steps: str | None = None, suggest: bool = False) -> WhatIf:
    """Replay a trace (a path, a ``labkit.trace.Trace`` or its ``EventTables``) unchanged and with ``changes``; see docs/reference.md.
    ``suggest``: also list what to change (``labkit.trace.whatif.suggest``)."""
    trace = as_trace(path_or_trace)
    rec = trace_records(trace)
    if not any(rec.threads.values()):
        raise UsageError(f"{Path(rec.file or 'trace').name} has no host events: nothing to replay")
    rec, g = trace_graph(trace)
    step_spans, pat = find_step_spans(rec, steps)
    changes = list(changes)
    matched = _check_changes(g, changes, step_spans)
    base = replay(g, [], step_spans)
    pred = replay(g, changes, step_spans) if changes else base
    step_of = _step_of_ops(g, step_spans) if step_spans else {}
    m_times, win_m = _windows(g, step_spans, None, step_of)
    b_times, _ = _windows(g, step_spans, base, step_of)
    p_times, win_p = _windows(g, step_spans, pred, step_of, pred.drops.ops)
    if changes:
        _warn_changes(g, changes, matched, step_spans, step_of, float(np.median(b_times)), pred, win_m)
    tokens = None
    if step_spans:
        toks = [_TOKENS.search(s.name) for _, s in step_spans]
        if all(toks):
            tokens = [int(t.group(1)) + int(t.group(2)) for t in toks]
    starts = np.array([o.start for o in rec.ops]) if rec.ops else np.zeros(0)
    ends = np.array([o.end for o in rec.ops]) if rec.ops else np.zeros(0)
    measured = _metrics(rec, step_spans, starts, ends, _steady(m_times, win_m), m_times, tokens)
    predicted = _metrics(rec, step_spans, pred.start, pred.end, _steady(p_times, win_p), p_times, tokens,
                         pred.drops.ops)
    errs = [abs(b - m) / m for b, m in zip(b_times, m_times) if m > 0]
    err = max(errs) if errs else 0.0
    check = {"step_ms_error": err, "tolerance": REPLAY_TOLERANCE, "ok": err <= REPLAY_TOLERANCE,
             "replayed_step_ms": [t / 1e3 for t in b_times]}
    notes = list(g.notes)
    if not step_spans:
        notes.append("no step spans (ProfilerStep#N or vLLM execute_*): the whole trace is one window")
    if not rec.ops:
        notes.append("no device events in this trace: host time only")
    if step_spans and tokens is None:
        notes.append("step names carry no token counts: no tokens/s")
    n_sync = sum(len(c) for c in g.syncs.values())
    suggestions = None
    if suggest:
        suggestions = make_suggestions(g, step_spans, pat, float(np.median(b_times)), win_m)
    kind = "simulated" if rec.simulated else ("measured-gpu" if rec.ops else "host-only")
    return WhatIf(
        source={"file": Path(rec.file).name if rec.file else None, "gpu": rec.gpu, "simulated": rec.simulated,
                "kind": kind, "labkit": rec.metadata.get("labkit"), "labkit_commit": labkit_commit()},
        steps={"pattern": pat, "count": len(step_spans) if step_spans else 1,
               "what": f"spans matching {pat!r}" if pat else "whole-trace window"},
        measured=measured, predicted=predicted, changes=matched, replay_check=check,
        gaps=_gaps(rec, pred, win_m, _launched_in(g)),
        assumptions={"synchronizing_calls": n_sync, "graph_replays": g.graph_units, "event_sync_lag": g.event_lag,
                     "event_sync_lag_from": g.event_lag_from, "stream_bound_us": 1.5,
                     "dropped_copies": len(pred.drops.copies),
                     "dropped_build_ops": len(pred.drops.ops - pred.drops.copies),
                     "per_copy_host_us": pred.drops.per_copy_us or None,
                     "pad_host_us": pred.drops.pad_us or None},
        notes=notes, suggestions=suggestions)
