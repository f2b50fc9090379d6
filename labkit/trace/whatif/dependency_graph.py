"""The dependency graph of a profiled run, for what-if replay (``labkit whatif``).

The rules: docs/trace-analyzer.md ("labkit whatif").
"""

from __future__ import annotations

import json
import logging
import re
from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

import pandas as pd

from labkit.trace.analysis.device.cuda_graphs import graph_launches, replay_index
from labkit.trace.read.columns import cat_mask, column_strings

logger = logging.getLogger(__name__)

#: a device op that started within this many us of its predecessor's end was held by the stream
STREAM_BOUND_US = 1.5
#: slack when matching a synchronizing call's return to the op it waited for (us)
SYNC_MATCH_US = 2.0
SYNC_NAMES = re.compile(r"(Stream|Device|Event|Ctx)Synchronize$")
BLOCKING_COPY_NAMES = re.compile(r"^(cudaMemcpy|cudaMemcpy2D|cuMemcpy(HtoD|DtoH|DtoD)?(_v2)?)$")
EVENT_RECORD_NAMES = re.compile(r"^(cudaEventRecord|cuEventRecord)")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")
#: host categories that are not work (instant markers, the profiler's own spans, overheads)
SKIP_HOST_CATS = ("Trace", "ac2g", "overhead", "cpu_instant_event", "gpu_user_annotation", "cuda_sync")


# -- plain records (the only shapes the rest of whatif sees) ------------------------------------
@dataclass
class Span:
    """A host span: annotation, Python frame, CPU op or runtime call (times in us)."""

    name: str
    cat: str
    start: float
    end: float
    corr: int = -1  #: runtime calls: correlation id (-1 otherwise)


@dataclass
class Op:
    """A device op (kernel, memcpy, memset) on ``stream`` = (device, stream id)."""

    name: str
    cat: str
    stream: tuple
    start: float
    end: float
    corr: int
    nbytes: int = -1
    replay: int = -1  #: the CUDA-graph replay it belongs to (``labkit.trace.analysis.device.cuda_graphs``; -1: none)


@dataclass
class Records:
    """A trace as plain records: host spans per thread, device ops in stream order, metadata."""

    threads: dict  #: (pid, tid) -> list[Span], sorted by start (longest first on ties)
    ops: list  #: list[Op], sorted by (stream, start)
    metadata: dict
    file: str | None = None
    gpu: str | None = None
    simulated: bool = False


def records_from_trace(trace) -> Records:
    """The adapter: a loaded trace (``EventTables``) -> ``Records``, the only place that knows the loader."""
    ev = trace.events
    cat, name = column_strings(ev["cat"]), column_strings(ev["name"])
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    ts = ev["ts_us"].to_numpy(dtype=float)
    end = ts + ev["dur_us"].to_numpy(dtype=float)
    corr = ev["correlation"].to_numpy()
    stream, device, nbytes = ev["stream"].to_numpy(), ev["device"].to_numpy(), ev["bytes"].to_numpy()
    is_dev = cat_mask(ev["cat"], DEVICE_CATS)
    is_rt = cat_mask(ev["cat"], RUNTIME_CATS)
    skip = cat_mask(ev["cat"], SKIP_HOST_CATS)
    threads: dict = defaultdict(list)
    ops: list = []
    # columns as Python lists first (``tolist`` gives int, float and str): one conversion per column
    d = np.flatnonzero(is_dev & (stream >= 0))
    replay = replay_index(pd.DataFrame({"correlation": corr[d]}), graph_launches(trace))
    for n, c, dev, st, a, z, k, b, r in zip(name[d].tolist(), cat[d].tolist(), device[d].tolist(), stream[d].tolist(),
                                             ts[d].tolist(), end[d].tolist(), corr[d].tolist(), nbytes[d].tolist(),
                                             replay.tolist()):
        ops.append(Op(n, c, (dev, st), a, z, k, b, r))
    h = np.flatnonzero(~is_dev & ~skip)
    host_corr = np.where(is_rt[h], corr[h], -1)
    for p, t, n, c, a, z, k in zip(pid[h].tolist(), tid[h].tolist(), name[h].tolist(), cat[h].tolist(),
                                   ts[h].tolist(), end[h].tolist(), host_corr.tolist()):
        threads[(p, t)].append(Span(n, c, a, z, k))
    for spans in threads.values():
        spans.sort(key=lambda s: (s.start, -s.end))
    ops.sort(key=lambda o: (o.stream, o.start, o.end))
    names = trace.device_names
    return Records(threads=dict(threads), ops=ops, metadata=dict(trace.metadata), file=trace.path,
                   gpu=names[0] if names else None, simulated=bool(trace.is_simulated))


# -- the graph ------------------------------------------------------------------------------------
@dataclass
class SyncCall:
    """A synchronizing call on a thread and the device point it waits for."""

    name: str
    start: float
    end: float
    deps: list  #: op indices whose replayed end (+ ``lat``) the call waits for
    lat: float  #: measured time from the device point to the call's return (us)
    cost: float  #: the call's own host cost without the wait (us)
    labels: tuple  #: names that ``--unsync`` patterns are matched against
    rule: str  #: how the device point was found
    on_start: bool = False  #: wait for the deps' start (a pageable copy that returned once staged)
    around: tuple = ()  #: names of the host spans around the call, outermost first


@dataclass
class Graph:
    """Constraints of a run (docs/reference.md); times in us."""

    rec: Records
    launch_of: dict  #: op index -> (thread key, launch call start)
    anchor: list  #: per op: ("launch", lat) | ("unit", anchor_op, offset) | ("abs", start)
    stream_prev: list  #: per op: (prev op index or -1, gap to keep)
    syncs: dict  #: thread key -> list[SyncCall] (sorted by start)
    graph_units: int = 0
    event_lag: int = 1
    event_lag_from: str = "default"
    notes: list = field(default_factory=list)


def _is_pageable_copy(op_name: str) -> bool:
    return "Pageable" in op_name and "Memcpy" in op_name


def trace_records(trace) -> Records:
    """``records_from_trace(trace)``, built once per loaded trace (kept on its ``EventTables``;
    the whatif treats traces, records and graphs as read-only)."""
    owner, cache = trace.__dict__.get("_whatif_graphs", (None, None))
    if owner is not trace.events:  # first call, or the events table was replaced
        cache = {}
        trace.__dict__["_whatif_graphs"] = (trace.events, cache)
    if "records" not in cache:
        cache["records"] = records_from_trace(trace)
    return cache["records"]


def async_hint(meta: dict) -> bool | None:
    """The run's ``async_scheduling`` from the lab's trace metadata (None when it does not say)."""
    lab = meta.get("labkit")
    if isinstance(lab, str):
        try:
            lab = json.loads(lab)
        except ValueError:
            lab = None
    v = lab.get("async_scheduling") if isinstance(lab, dict) else None
    return v if isinstance(v, bool) else None


def trace_graph(trace) -> tuple[Records, Graph]:
    """``(trace_records(trace), build_graph(...))`` with the scheduling hint of the trace's own
    metadata, built once per loaded trace: the graph every replay of the trace uses."""
    rec = trace_records(trace)
    cache = trace.__dict__["_whatif_graphs"][1]
    if "graph" not in cache:
        cache["graph"] = build_graph(rec, async_hint=async_hint(rec.metadata))
    return rec, cache["graph"]


def build_graph(rec: Records, *, async_hint: bool | None = None) -> Graph:
    """Derive the replay constraints from ``rec`` (docs/reference.md)."""
    ops = rec.ops
    runtime: dict = {}  # corr -> (thread key, Span)
    for key, spans in rec.threads.items():
        for s in spans:
            if s.corr >= 0:
                runtime[s.corr] = (key, s)
    launch_of: dict = {}
    for i, o in enumerate(ops):
        hit = runtime.get(o.corr) if o.corr >= 0 else None
        if hit is not None:
            launch_of[i] = (hit[0], hit[1].start)
    anchor, stream_prev, units = _device_constraints(ops, launch_of)
    syncs, lag, lag_from = _sync_calls(rec, ops, launch_of, runtime, async_hint)
    g = Graph(rec=rec, launch_of=launch_of, anchor=anchor,
              stream_prev=stream_prev, syncs=syncs, graph_units=units, event_lag=lag, event_lag_from=lag_from)
    missing = sum(1 for i in range(len(ops)) if i not in launch_of)
    if missing:
        g.notes.append(f"{missing} of {len(ops)} device ops have no launch call in the trace: they keep their "
                       "measured gap behind the previous op on their stream")
    return g


def _device_constraints(ops: list, launch_of: dict):
    anchor: list = [None] * len(ops)
    stream_prev: list = [(-1, 0.0)] * len(ops)
    prev_by_stream: dict = {}
    # graph units: the ops of one CUDA-graph replay (``Op.replay``) whose launch is in the trace;
    # the first by start leads
    unit_lead: dict = {}
    for i, o in enumerate(ops):
        if o.replay >= 0 and i in launch_of:
            lead = unit_lead.get(o.replay)
            if lead is None or o.start < ops[lead].start:
                unit_lead[o.replay] = i
    lats, gaps = [], []
    kinds = []
    for i, o in enumerate(ops):
        p = prev_by_stream.get(o.stream, -1)
        prev_by_stream[o.stream] = i
        gap = o.start - ops[p].end if p >= 0 else None
        li = launch_of.get(i)
        lead = unit_lead.get(o.replay) if li is not None else None
        if lead is not None and lead != i:
            kinds.append(("unit", lead, p, gap))
        elif li is not None:
            lat = o.start - li[1]
            stream_bound = gap is not None and gap <= STREAM_BOUND_US
            (gaps if stream_bound else lats).append(gap if stream_bound else lat)
            kinds.append(("launch-stream" if stream_bound else "launch", lat, p, gap))
        else:
            kinds.append(("none", None, p, gap))
    lat_typ = float(np.median(lats)) if lats else 0.0
    gap_typ = float(max(0.0, np.median(gaps))) if gaps else 0.0
    for i, (kind, x, p, gap) in enumerate(kinds):
        o = ops[i]
        if kind == "unit":
            anchor[i] = ("unit", x, o.start - ops[x].start)
            stream_prev[i] = (p, gap if gap is not None and gap <= STREAM_BOUND_US else min(gap_typ, gap or 0.0))
        elif kind == "launch-stream":  # held by its stream: keep that gap, launch latency typical
            anchor[i] = ("launch", min(x, lat_typ))
            stream_prev[i] = (p, gap)
        elif kind == "launch":  # held by its launch: keep that latency
            anchor[i] = ("launch", x)
            stream_prev[i] = (p, min(gap_typ, gap) if gap is not None else 0.0)
        else:  # no launch call in the trace: keep the measured gap (or time, for a stream's first op)
            anchor[i] = ("abs", o.start) if p < 0 else None
            stream_prev[i] = (p, gap if gap is not None else 0.0)
    return anchor, stream_prev, len(unit_lead)


def _stream_index(ops: list):
    """Per stream: op indices in stream order and their end times (for the sync look-ups)."""
    by: dict = defaultdict(list)
    for i, o in enumerate(ops):
        by[o.stream].append(i)
    ends = {s: np.maximum.accumulate(np.array([ops[i].end for i in idx])) for s, idx in by.items()}
    return by, ends


def _last_done(ops, by, ends, launch_of, before: float, done_by: float) -> list:
    """Per stream: the last op launched before ``before`` that had finished by ``done_by``."""
    out = []
    for s, idx in by.items():
        k = bisect_right(ends[s], done_by) - 1
        while k >= 0:
            li = launch_of.get(idx[k])
            if li is None or li[1] < before:
                out.append(idx[k])
                break
            k -= 1
    return out


def _ancestors(spans: list) -> dict:
    """For each runtime call on a thread (by position): the names of the spans around it, outermost first."""
    out: dict = {}
    stack: list = []  # (end, name)
    for k, x in enumerate(spans):
        while stack and stack[-1][0] < x.end:
            stack.pop()
        if x.corr >= 0:
            out[k] = tuple(n for _, n in stack)
        stack.append((x.end, x.name))
    return out


def _sync_calls(rec: Records, ops: list, launch_of: dict, runtime: dict, async_hint):
    by, ends = _stream_index(ops)
    op_of_corr = {o.corr: i for i, o in enumerate(ops) if o.corr >= 0}
    out: dict = {}
    pending_events = []  # (thread key, span, enclosing labels) resolved once the lag is known
    learned: Counter = Counter()
    learned_by: dict = defaultdict(Counter)  # per thread
    for key, spans in rec.threads.items():
        around = _ancestors(spans)
        records = [x.start for x in spans if x.corr >= 0 and EVENT_RECORD_NAMES.match(x.name)]
        calls = []
        for k, s in enumerate(spans):
            if s.corr < 0:
                continue
            copy_i = op_of_corr.get(s.corr)
            copy = ops[copy_i] if copy_i is not None else None
            if SYNC_NAMES.search(s.name):
                pass
            elif copy is not None and copy.cat in ("gpu_memcpy", "Memcpy") and (
                    BLOCKING_COPY_NAMES.match(s.name) or _is_pageable_copy(copy.name)):
                pass
            else:
                continue
            labels = (s.name,) + ((copy.name,) if copy is not None else ()) + around[k]
            if copy is not None and not SYNC_NAMES.search(s.name):
                # a blocking copy waits for its own copy: its end if the call outlived it, else its start
                if s.end >= copy.end - SYNC_MATCH_US:
                    point, rule = copy.end, "copy end"
                elif s.end >= copy.start - SYNC_MATCH_US:
                    point, rule = copy.start, "copy start"
                else:
                    continue  # returned before its copy began: it did not block
                calls.append(_sync(s, [copy_i], point, labels, rule, point_is_start=rule == "copy start",
                                   around=around[k]))
                continue
            done = _last_done(ops, by, ends, launch_of, s.start, s.end + SYNC_MATCH_US)
            point = max((ops[i].end for i in done), default=None)
            waited = point is not None and point > s.start + SYNC_MATCH_US
            if "Event" in s.name and not waited:
                pending_events.append((key, s, labels, records, len(calls), around[k]))
                calls.append(None)
                continue
            if "Event" in s.name and waited:
                lag = _lag_of(ops, by, ends, launch_of, records, s, point)
                if lag:
                    learned[lag] += 1
                    learned_by[key][lag] += 1
            calls.append(_sync(s, done, point, labels, "waited" if waited else "drained", around=around[k]))
        out[key] = calls
    if learned:
        lag, lag_from = learned.most_common(1)[0][0], "event syncs that waited in this trace"
    elif async_hint is not None:
        lag, lag_from = (2, "run metadata: async scheduling") if async_hint else (1, "run metadata: sync scheduling")
    else:
        lag, lag_from = 1, "default (no event sync waited; latest record assumed)"
    for key, s, labels, records, slot, enclosing in pending_events:
        own = learned_by.get(key)
        lag_here = own.most_common(1)[0][0] if own else lag
        k = bisect_right(records, s.start) - lag_here
        if k < 0:
            out[key][slot] = _sync(s, [], None, labels, f"event (record {lag_here} back not in trace)",
                                   around=enclosing)
            continue
        done = _last_done(ops, by, ends, launch_of, records[k], s.end + SYNC_MATCH_US)
        point = max((ops[i].end for i in done), default=None)
        out[key][slot] = _sync(s, done, point, labels, f"event record {lag_here} back", around=enclosing)
    for key in out:
        out[key] = sorted((c for c in out[key] if c is not None), key=lambda c: c.start)
    return out, lag, lag_from


def _lag_of(ops, by, ends, launch_of, records, s, point) -> int | None:
    k0 = bisect_right(records, s.start)
    for lag in range(1, min(6, k0) + 1):
        done = _last_done(ops, by, ends, launch_of, records[k0 - lag], s.end + SYNC_MATCH_US)
        if done and abs(max(ops[i].end for i in done) - point) <= SYNC_MATCH_US:
            return lag
    return None


def _sync(s: Span, deps: list, point, labels, rule: str, point_is_start: bool = False, around: tuple = ()) -> SyncCall:
    dur = s.end - s.start
    if point is None or point <= s.start:
        lat, cost = 0.0, dur
        if point is None:
            deps = []
    else:
        lat = max(0.0, s.end - point)
        cost = min(dur, lat)
    return SyncCall(s.name, s.start, s.end, list(deps), lat, cost, tuple(labels), rule, on_start=point_is_start,
                    around=tuple(around))
