"""``labkit whatif TRACE --suggest``: what to change, each entry with the argument that targets it.

Details: docs/trace-analyzer.md ("labkit whatif").
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import defaultdict

import numpy as np

from labkit.trace.analysis.device.h2d import MIN_COUNT, SMALL_BYTES
from labkit.trace.whatif.changes import Change, is_pageable_h2d
from labkit.trace.whatif.reads import find_placeholder_reads
from labkit.trace.whatif.replay import replay
from labkit.trace.whatif.steps import _step_of_ops, between_steps, device_idle_intervals, step_median_us

#: entries per list
TOP = 5
_NUMBER = re.compile(r"(0x[0-9a-fA-F]+|\d+)")
_SPECIAL = re.compile(r"([.^$*+?{}\[\]\\|()])")


def name_pattern(name: str) -> str:
    """An anchored regex for ``name`` with every number generalised (``^forward/layer_\\d+$``;
    hexadecimal addresses as ``0x[0-9a-f]+``)."""
    out = []
    for k, part in enumerate(_NUMBER.split(name)):
        if k % 2:
            out.append("0x[0-9a-f]+" if part.startswith("0x") else r"\d+")
        else:
            out.append(_SPECIAL.sub(r"\\\1", part))
    return "^" + "".join(out) + "$"


class _IdleClock:
    """Device idle accumulated up to a time, for overlap sums in O(log n)."""

    def __init__(self, idle: list) -> None:
        self.starts = [a for a, _ in idle]
        self.ends = [z for _, z in idle]
        self.cum = np.cumsum([0.0] + [z - a for a, z in idle]).tolist()

    def upto(self, t: float) -> float:
        k = bisect_right(self.starts, t) - 1
        if k < 0:
            return 0.0
        return self.cum[k] + min(t, self.ends[k]) - self.starts[k]

    def between(self, a: float, z: float) -> float:
        return max(0.0, self.upto(z) - self.upto(a))


def _holds_step(steps: list, s) -> bool:
    """Whether span ``s`` holds one of ``steps`` (sorted ``(start, end)`` of a thread's step spans)."""
    k = bisect_left(steps, (s.start, -float("inf")))
    while k < len(steps) and steps[k][0] < s.end:
        if steps[k][1] <= s.end:
            return True
        k += 1
    return False


def _span_groups(rec, idle: _IdleClock, step_rx, threads, steps: list) -> dict:
    """pattern -> [count, idle overlap us] over the host spans of ``threads`` (runtime calls, step
    spans and the patterns of spans around a step left out: the change would remove steps)."""
    out: dict = defaultdict(lambda: [0, 0.0])
    pats: dict = {}
    around_steps: set = set()
    step_starts: dict = defaultdict(list)  # thread key -> sorted [(start, end)] of its steps
    for key, st in steps:
        step_starts[key].append((st.start, st.end))
    for v in step_starts.values():
        v.sort()
    for key, spans in rec.threads.items():
        if key not in threads:
            continue
        starts = step_starts.get(key, [])
        cur: dict = {}  # pattern -> [start, end] of the merged run on this thread
        for s in spans:
            if s.corr >= 0 or (step_rx is not None and step_rx.search(s.name)):
                continue
            pat = pats.get(s.name)
            if pat is None:
                pat = pats[s.name] = name_pattern(s.name)
            if starts and _holds_step(starts, s):  # removing it would remove a step
                around_steps.add(pat)
                continue
            out[pat][0] += 1
            run = cur.get(pat)
            if run is not None and s.start <= run[1]:
                run[1] = max(run[1], s.end)
                continue
            if run is not None:
                out[pat][1] += idle.between(*run)
            cur[pat] = [s.start, s.end]
        for pat, run in cur.items():
            out[pat][1] += idle.between(*run)
    return {pat: v for pat, v in out.items() if pat not in around_steps}


def _sync_sites(g) -> dict:
    """pattern -> [calls, waited us, call names] for the synchronizing calls, by the innermost span around them."""
    out: dict = {}
    for calls in g.syncs.values():
        for c in calls:
            pat = name_pattern(c.around[-1] if c.around else c.name)
            site = out.setdefault(pat, [0, 0.0, set()])
            site[0] += 1
            site[1] += (c.end - c.start) - c.cost
            site[2].add(c.name)
    return out


def _copy_sites(g, steps, step_rx) -> dict:
    """pattern -> copies in the busiest step, for the innermost annotations (not steps) around small
    pageable H2D copies made at least ``MIN_COUNT`` times in one step."""
    starts = [s.start for _, s in steps]
    per: dict = defaultdict(lambda: defaultdict(int))
    anns: dict = {}
    for i, op in enumerate(g.rec.ops):
        if not is_pageable_h2d(op.name) or i not in g.launch_of or op.nbytes > SMALL_BYTES:
            continue
        key, lt = g.launch_of[i]
        if key not in anns:
            a = [s for s in g.rec.threads[key] if s.cat == "user_annotation" and s.corr < 0
                 and not (step_rx is not None and step_rx.search(s.name))]
            anns[key] = (a, [s.start for s in a])
        a, a_starts = anns[key]
        k = bisect_right(a_starts, lt) - 1
        while k >= 0 and a[k].end < lt:
            k -= 1
        if k < 0:
            continue
        j = bisect_right(starts, lt) - 1
        per[name_pattern(a[k].name)][j if j >= 0 and lt < steps[j][1].end else -1] += 1
    return {pat: max(n.values()) for pat, n in per.items() if max(n.values()) >= MIN_COUNT}


def suggest(g, step_spans: list, step_pat: str | None, base_us: float, win, top: int = TOP) -> dict:
    """The three lists of docs/reference.md for a graph ``g`` (``labkit.trace.whatif.predict``
    supplies the steps, the unchanged replay's median step ``base_us`` and the measured window)."""
    step_of = _step_of_ops(g, step_spans) if step_spans else {}
    host_only = not g.rec.ops
    idle = _IdleClock(between_steps(step_spans, win) if host_only else device_idle_intervals(g.rec, win))
    step_rx = re.compile(step_pat) if step_pat else None
    sync_labels = [c.labels for calls in g.syncs.values() for c in calls]

    def effect(changes: list) -> dict:
        p = step_median_us(g, step_spans, replay(g, changes, step_spans), step_of)
        return {"argument": " ".join(c.argument() for c in changes), "predicted_step_ms": p / 1e3,
                "saving_frac": (base_us - p) / base_us if base_us > 0 else None}

    # the threads that launch device work (host-only: run the steps): a span elsewhere (a thread
    # waiting on a queue) delays nothing
    launching = {key for key, _ in step_spans} if host_only else {key for key, _ in g.launch_of.values()}
    spans = sorted(_span_groups(g.rec, idle, step_rx, launching, step_spans).items(), key=lambda kv: -kv[1][1])
    out_spans = []
    for pat, (n, overlap) in spans[:top]:
        if overlap <= 0:
            break
        rx = re.compile(pat)
        changes = [Change("scale", pat, 0.0)]
        if any(rx.search(x) for labels in sync_labels for x in labels):
            changes.append(Change("unsync", pat))
        out_spans.append({"pattern": pat, "count": n, "idle_overlap_ms": overlap / 1e3, **effect(changes)})
    sites = sorted(_sync_sites(g).items(), key=lambda kv: -kv[1][1])
    out_syncs = [{"pattern": pat, "count": n, "calls": sorted(names), "waited_ms": w / 1e3,
                  **effect([Change("unsync", pat)])} for pat, (n, w, names) in sites[:top] if w > 0]
    out_copies = [{"pattern": pat, "per_step": n, **effect([Change("drop_copies", pat, keep=0)])}
                  for pat, n in sorted(_copy_sites(g, step_spans, step_rx).items(), key=lambda kv: -kv[1])[:top]]
    found = find_placeholder_reads(g, step_spans) if step_spans else None
    out_reads = [] if found is None else [{**found.to_json(), **effect([found.change])}]
    return {"base_step_ms": base_us / 1e3,
            "ranked_by": "time between steps" if host_only else "device idle",
            "reads": out_reads, "spans": out_spans, "syncs": out_syncs, "copies": out_copies}


def suggestion_lines(s: dict) -> list[str]:
    """The suggestions as printed by ``labkit whatif --suggest``."""
    out = [f"suggestions (the unchanged replay: {s['base_step_ms']:.3f} ms a step):"]

    def rows(title, items, fmt):
        out.append(title)
        if not items:
            out.append("  (none)")
        for it in items:
            sv = it["saving_frac"]
            out.append(f"  {fmt(it):>22s}  -> {it['predicted_step_ms']:10.3f} ms "
                       f"({'n/a' if sv is None else f'{-100 * sv:+.1f}%'})  {it['argument']}")

    rows("placeholder reads (the #40143 pattern, removed):", s.get("reads", []),
         lambda it: f"{float(np.median(it['reads_per_step'])):.0f} a step, {it['read_us']:.2f} us")
    between = s.get("ranked_by") == "time between steps"
    rows(f"host spans by the {'time between steps they take' if between else 'device idle they overlap'} (removed):",
         s["spans"], lambda it: f"{it['idle_overlap_ms']:.3f} ms {'between' if between else 'idle'}, {it['count']}x")
    rows("synchronizing call sites by the time they waited (made non-blocking):", s["syncs"],
         lambda it: f"{it['waited_ms']:.3f} ms waited, {it['count']}x")
    rows(f"repeated small pageable copies (>= {MIN_COUNT} a step, removed):", s["copies"],
         lambda it: f"{it['per_step']} a step")
    return out
