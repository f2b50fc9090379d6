"""Replay of a run's dependency graph with changes: scaled host work, non-blocking syncs, fewer copies."""

from __future__ import annotations

import logging
import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from labkit.trace.whatif.changes import Change, CopyDrops, plan_copy_drops
from labkit.trace.whatif.dependency_graph import Graph

logger = logging.getLogger(__name__)

# -- replay -----------------------------------------------------------------------------------------
@dataclass
class Replay:
    """Replayed times: per thread boundary values, op starts and ends (us)."""

    bounds: dict  #: thread key -> ((boundary times, segment scales, sync segments), replayed values)
    start: np.ndarray
    end: np.ndarray
    drops: CopyDrops = field(default_factory=CopyDrops)  #: what ``drop_copies`` changes removed

    def host_time(self, key, t: float) -> float:
        """Replayed time of the measured host time ``t`` on thread ``key``."""
        thread, v = self.bounds[key]
        if t < thread[0][0]:
            return float(v[0] - (thread[0][0] - t))
        return _map(thread, v, t)

    def host_end(self) -> float:
        """The latest replayed host time on any thread."""
        return max((float(v[-1]) for _, v in self.bounds.values()), default=-math.inf)


def _boundaries(g: Graph, key, spans, changes, steps, unsynced, drops: CopyDrops):
    """Boundary times of a thread, segment scales, and which segments are synchronizing calls."""
    syncs = g.syncs.get(key, [])
    pts = {spans[0].start, max(s.end for s in spans)}
    for c in syncs:
        pts.update((c.start, c.end))
    for tk, lt in g.launch_of.values():
        if tk == key:
            pts.add(lt)
    for tk, s in steps:
        if tk == key:
            pts.update((s.start, s.end))
    scaled = []
    for ch in changes:
        if ch.kind != "scale":
            continue
        rx = re.compile(ch.pattern)
        hit = [(s.start, s.end) for s in spans if rx.search(s.name)]
        scaled.append((ch.factor, hit))
        for a, z in hit:
            pts.update((a, z))
    for factor, hit in drops.scaled.get(key, ()):
        scaled.append((factor, hit))
        for a, z in hit:
            pts.update((a, z))
    b = np.array(sorted(pts))
    # drop boundaries strictly inside a synchronizing call (the call is one unit)
    seg_sync = {}
    if syncs:
        s_start = np.array([c.start for c in syncs])
        lo, hi = np.searchsorted(b, s_start, "right"), np.searchsorted(b, [c.end for c in syncs], "left")
        b = b[_covered(len(b), lo, hi) == 0]
        ks = np.searchsorted(b, s_start).tolist()
        bl = b.tolist()
        off = unsynced.get(key, ())
        for ci, (c, k) in enumerate(zip(syncs, ks)):
            if k < len(bl) - 1 and bl[k] == c.start and bl[k + 1] == c.end and k not in seg_sync:
                seg_sync[k] = (c, ci in off)
    scale = np.ones(max(len(b) - 1, 1))
    for factor, hit in scaled:
        if hit:
            first, last = np.searchsorted(b, [s for s, _ in hit]), np.searchsorted(b, [e for _, e in hit])
            scale[_covered(len(scale), first, last) > 0] *= factor
    return b, scale, seg_sync


def _covered(n: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How many of the index ranges ``[lo, hi)`` cover each of ``0 .. n - 1`` (empty ranges cover nothing)."""
    real = lo < hi
    cover = np.zeros(n + 1, np.int64)
    np.add.at(cover, np.minimum(lo[real], n), 1)
    np.add.at(cover, np.minimum(hi[real], n), -1)
    return np.cumsum(cover)[:n]


def replay(g: Graph, changes: list[Change] = (), steps: list = ()) -> Replay:
    """Replay ``g`` with ``changes``: Kahn order over host boundaries and device ops."""
    ops = g.rec.ops
    drops = plan_copy_drops(g, changes, steps)
    unsynced = _unsynced(g, changes)
    for key, idx in drops.unsync.items():
        unsynced.setdefault(key, set()).update(idx)
    dropped = drops.ops
    threads = {}
    base, n = {}, 0
    for key, spans in g.rec.threads.items():
        if not spans:
            continue
        threads[key] = _boundaries(g, key, spans, changes, steps, unsynced, drops)
        base[key] = n
        n += len(threads[key][0])
    n_host = n
    n_all = n_host + len(ops)
    deps: list = [[] for _ in range(n_all)]
    for key, (b, scale, seg_sync) in threads.items():
        o = base[key]
        for k in range(1, len(b)):
            deps[o + k].append(o + k - 1)
            sc = seg_sync.get(k - 1)
            if sc is not None and not sc[1]:
                deps[o + k].extend(n_host + j for j in sc[0].deps)
    launch_node = {}
    for i, (key, lt) in g.launch_of.items():
        b = threads[key][0]
        launch_node[i] = base[key] + max(0, bisect_right(b, lt) - 1)
        deps[n_host + i].append(launch_node[i])
    for i in range(len(ops)):
        p = g.stream_prev[i][0]
        if p >= 0:
            deps[n_host + i].append(n_host + p)
        a = g.anchor[i]
        if a is not None and a[0] == "unit":
            deps[n_host + i].append(n_host + a[1])
    order = _topo(deps)
    # the walk reads and writes plain lists of floats (numpy scalars cost far more one at a time)
    start = [float(o.start) for o in ops]
    end = [float(o.end) for o in ops]
    thread_of: list = [None] * n_host
    for key, o in base.items():
        thread_of[o:o + len(threads[key][0])] = [key] * len(threads[key][0])
    lists = {k: (v[0].tolist(), v[1].tolist(), v[2]) for k, v in threads.items()}
    vals = {k: v[0].astype(float).tolist() for k, v in threads.items()}  # measured until replayed
    for node in order:
        if node < n_host:
            key = thread_of[node]
            k = node - base[key]
            b, scale, seg_sync = lists[key]
            v = vals[key]
            if k == 0:
                v[0] = b[0]
                continue
            sc = seg_sync.get(k - 1)
            if sc is None:
                v[k] = v[k - 1] + scale[k - 1] * (b[k] - b[k - 1])
            else:
                c, off = sc
                t = v[k - 1] + scale[k - 1] * c.cost
                if not off and c.deps:
                    dev = max((start if c.on_start else end)[j] for j in c.deps)
                    t = max(t, dev + c.lat)
                v[k] = t
        else:
            i = node - n_host
            op = ops[i]
            t = -math.inf
            a = g.anchor[i]
            if a is not None:
                if a[0] == "launch":
                    key, lt = g.launch_of[i]
                    t = _map(lists[key], vals[key], lt) + a[1]
                elif a[0] == "unit":
                    t = start[a[1]] + a[2]
                else:
                    t = a[1]
            p, gap = g.stream_prev[i]
            if i in dropped:  # gone: zero length where its stream was
                start[i] = end[i] = end[p] if p >= 0 else t
                continue
            if p >= 0:
                t = max(t, end[p] + (0.0 if p in dropped else gap))
            start[i] = t
            end[i] = t + (op.end - op.start)
    return Replay({k: (threads[k], np.array(vals[k], dtype=float)) for k in threads},
                  np.array(start, dtype=float), np.array(end, dtype=float), drops)


def _map(thread, v, t: float) -> float:
    """Replayed time of measured host time ``t`` on a thread (a point inside a sync call: its start)."""
    b, scale, seg_sync = thread
    k = max(0, bisect_right(b, t) - 1)
    if k >= len(b) - 1:
        return float(v[k] + (t - b[k]))
    if k in seg_sync:
        return float(v[k])
    return float(v[k] + scale[k] * (t - b[k]))


def _topo(deps: list) -> list:
    n = len(deps)
    indeg = [len(d) for d in deps]
    out: list = [[] for _ in range(n)]
    for j, d in enumerate(deps):
        for i in d:
            out[i].append(j)
    stack = [j for j in range(n) if indeg[j] == 0]
    stack.reverse()
    order = []
    while stack:
        j = stack.pop()
        order.append(j)
        for m in out[j]:
            indeg[m] -= 1
            if indeg[m] == 0:
                stack.append(m)
    if len(order) < n:  # a cycle (clock skew between host and device timelines)
        left = [j for j in range(n) if indeg[j] > 0]
        logger.warning("whatif: %d nodes in dependency cycles; their inputs keep measured times", len(left))
        order.extend(left)
    return order


def _unsynced(g: Graph, changes) -> dict:
    out: dict = {}
    for ch in changes:
        if ch.kind != "unsync":
            continue
        rx = re.compile(ch.pattern)
        for key, calls in g.syncs.items():
            for ci, c in enumerate(calls):
                if any(rx.search(x) for x in c.labels):
                    out.setdefault(key, set()).add(ci)
    return out
