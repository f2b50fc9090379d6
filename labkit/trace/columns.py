"""Column store for loaded trace events: typed append-only arrays with interned strings.

The reader (``labkit.trace.reader``) hands decoded JSON events to a ``ColumnStore``
(``add_event``); ``frames()`` turns the
columns into the ``events``, ``flows`` and ``threads`` DataFrames of a ``Trace``. Also holds
the category groups the analyses use and ``LoadStats`` (what the loader saw and skipped).

Event row layout (one tuple per kept complete ``X`` event, in file order)::

    (cat, name, pid, tid, ts_us, dur_us, stream, device, correlation, external_id,
     bytes, grid, block, index)

``cat``/``name``/``grid``/``block`` are codes of the matching interners; integers absent from
the trace are -1. Flow rows are ``(id, ord(ph), ts_us, pid, tid, cat)``.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

#: categories of device activity that occupy a stream (HTA's kernel categories)
BUSY_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
#: categories whose events live on the device timeline
DEVICE_CATS = BUSY_CATS + ("cuda_sync", "gpu_user_annotation")
#: categories of host calls into the CUDA runtime/driver that carry a correlation id
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")

KIND_HOST, KIND_RUNTIME, KIND_DEVICE, KIND_IGNORED = 0, 1, 2, 3
_NUM = (int, float)
_BIG = 1e308  #: |ts|, dur at or beyond this are not finite floats (huge ints included)
_EVENT_TYPES = ("i", "i", "q", "q", "d", "d", "q", "q", "q", "q", "q", "i", "i", "q")
_FLOW_TYPES = ("q", "b", "d", "q", "q", "i")


@dataclass
class LoadStats:
    """What the loader saw: counts by phase, skipped events and why, timestamp flavour."""

    n_events: int = 0  #: entries in traceEvents
    n_complete: int = 0  #: kept ``X`` events
    n_flows: int = 0
    n_other: int = 0  #: instant, counter and other phases (counted, not kept)
    skipped: int = 0  #: malformed events (see ``labkit.trace.load`` for the policy)
    non_objects: int = 0  #: entries of traceEvents that are not JSON objects
    skip_reasons: Counter = field(default_factory=Counter)
    first_skipped: list = field(default_factory=list)  #: up to 5 ``(index, reason)``
    ts_float: bool = False  #: some ``ts`` was written as a float (sub-microsecond)
    ts_missing: bool = False  #: some event had no ``ts``
    bytes_read: int = 0  #: bytes of (gunzipped) JSON read
    found: bool = False  #: a traceEvents array was read

    def skip(self, index: int, reason: str) -> None:
        self.skipped += 1
        self.skip_reasons[reason] += 1
        if len(self.first_skipped) < 5:
            self.first_skipped.append((index, reason))


class Interner:
    """Map strings to small int codes (one table per column)."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.values: list[str] = []

    def __call__(self, s) -> int:
        if type(s) is not str:
            s = "" if s is None else str(s)
        code = self.codes.get(s)
        if code is None:
            code = len(self.values)
            self.codes[s] = code
            self.values.append(s)
        return code


_I64 = 1 << 63


def int_or(v, default: int = -1) -> int:
    """``v`` as an int64 where it is one (or an integral float, or a numeric string), else ``default``."""
    t = type(v)
    if t is float and math.isfinite(v) and v.is_integer():
        v, t = int(v), int
    elif t is str:
        try:
            v, t = int(v), int
        except ValueError:
            return default
    if t is int and -_I64 <= v < _I64:
        return v
    return default


def _bad_x_reason(ts, dur) -> str:
    if type(ts) not in _NUM or type(dur) not in _NUM:
        return "complete event without numeric ts/dur"
    if dur < 0:
        return "negative duration"
    return "non-finite ts/dur"


def _dims(v) -> str:
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return "" if v is None else str(v)


def category_kind(cat) -> int:
    """Which row layout a category gets: host, runtime (correlation), device (stream, bytes...) or ignored."""
    if cat == "Trace":
        return KIND_IGNORED
    return KIND_DEVICE if cat in DEVICE_CATS else KIND_RUNTIME if cat in RUNTIME_CATS else KIND_HOST


class ColumnStore:
    """Append-only column store: rows gather in ``rows``/``flows`` lists, ``flush()`` moves them into typed arrays."""

    def __init__(self) -> None:
        self.cols = [array(t) for t in _EVENT_TYPES]
        self.flow_cols = [array(t) for t in _FLOW_TYPES]
        self.cats = Interner()
        self.names = Interner()
        self.dims = Interner()
        self.dims("")
        self.kind: dict[int, int] = {}  # cat code -> KIND_*
        self.threads: list[tuple] = []
        self.rows: list[tuple] = []
        self.flows: list[tuple] = []

    def cat_code(self, cat) -> tuple[int, int]:
        """``(code, kind)`` of a category."""
        c = self.cats(cat)
        k = self.kind.get(c)
        if k is None:
            k = self.kind[c] = category_kind(cat)
        return c, k

    def add_event(self, i: int, e, stats: LoadStats) -> None:
        """Add one decoded traceEvents entry (any phase); malformed ones are counted in ``stats``."""
        if type(e) is not dict:
            stats.non_objects += 1
            stats.skip(i, "event is not an object")
            return
        ph = e.get("ph")
        ts = e.get("ts")
        tt = type(ts)
        if tt is float:
            stats.ts_float = True
        elif ts is None:
            stats.ts_missing = True
        if ph == "X":
            dur = e.get("dur")
            if not ((tt is float or tt is int) and type(dur) in _NUM and 0 <= dur < _BIG and -_BIG < ts < _BIG):
                stats.skip(i, _bad_x_reason(ts, dur))
                return
            args = e.get("args")
            if type(e.get("name")) is not str or (args is not None and type(args) is not dict):
                stats.skip(i, "complete event without a string name" if type(e.get("name")) is not str
                           else "args is not an object")
                return
            cat = e.get("cat")
            if cat == "Trace":  # the profiler's own span: counted, not kept
                stats.n_other += 1
                return
            c, k = self.cat_code(cat)
            pid = int_or(e.get("pid"))
            tid = int_or(e.get("tid"))
            name = self.names(e["name"])
            if args is None:
                args = {}
            if k == KIND_HOST:
                self.rows.append((c, name, pid, tid, ts, dur, -1, -1, -1, int_or(args.get("External id", -1)),
                                  -1, 0, 0, i))
                return
            corr = int_or(args.get("correlation"))
            ext = int_or(args.get("External id"))
            if k == KIND_RUNTIME:
                self.rows.append((c, name, pid, tid, ts, dur, -1, -1, corr, ext, -1, 0, 0, i))
                return
            dev = args.get("device")
            self.rows.append((c, name, pid, tid, ts, dur, int_or(args.get("stream")),
                              int_or(dev) if dev is not None else pid, corr, ext, int_or(args.get("bytes")),
                              self.dims(_dims(args.get("grid"))), self.dims(_dims(args.get("block"))), i))
        elif ph == "s" or ph == "f" or ph == "t":
            if not ((tt is float or tt is int) and -_BIG < ts < _BIG):
                stats.skip(i, "flow event without numeric ts")
                return
            self.flows.append((int_or(e.get("id")), ord(ph), ts, int_or(e.get("pid")), int_or(e.get("tid")),
                               self.cats(e.get("cat"))))
        elif ph == "M":
            args = e.get("args")
            label = args.get("name", args.get("sort_index", "")) if type(args) is dict else ""
            self.threads.append((int_or(e.get("pid")), int_or(e.get("tid")), str(e.get("name")), str(label)))
        else:
            stats.n_other += 1

    def flush(self, stats: LoadStats) -> None:
        """Move pending rows into the typed column arrays."""
        if self.rows:
            stats.n_complete += len(self.rows)
            for col, vals in zip(self.cols, zip(*self.rows)):
                col.extend(vals)
            self.rows = []
        if self.flows:
            stats.n_flows += len(self.flows)
            for col, vals in zip(self.flow_cols, zip(*self.flows)):
                col.extend(vals)
            self.flows = []

    def frames(self):
        """``(events, flows, threads)`` DataFrames (see ``labkit.trace.load`` for the columns)."""
        import pandas as pd

        def col(a, dtype):  # a view: the DataFrame copies what it keeps, so no second copy here
            return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)

        (cat, name, pid, tid, ts, dur, stream, device, corr, ext, nbytes, grid, block, index) = self.cols
        data = {
            "cat": col(cat, np.int32), "name": col(name, np.int32), "pid": col(pid, np.int64),
            "tid": col(tid, np.int64), "ts": col(ts, np.float64), "dur": col(dur, np.float64),
            "stream": col(stream, np.int64), "device": col(device, np.int64), "correlation": col(corr, np.int64),
            "external_id": col(ext, np.int64), "bytes": col(nbytes, np.int64), "grid": col(grid, np.int32),
            "block": col(block, np.int32), "index": col(index, np.int64),
        }
        dims = np.asarray(self.dims.values, dtype=object)
        events = pd.DataFrame({
            "cat": pd.Categorical.from_codes(data["cat"], categories=self.cats.values),
            "name": pd.Categorical.from_codes(data["name"], categories=self.names.values),
            "pid": data["pid"],
            "tid": data["tid"],
            "ts_us": data["ts"],
            "dur_us": data["dur"],
            "stream": data["stream"],
            "device": data["device"],
            "correlation": data["correlation"],
            "external_id": data["external_id"],
            "bytes": data["bytes"],
            "grid": dims[data["grid"]],
            "block": dims[data["block"]],
            "index": data["index"],
        })
        f_id, f_ph, f_ts, f_pid, f_tid, f_cat = self.flow_cols
        flow_cats = np.asarray(self.cats.values, dtype=object)
        flows = pd.DataFrame({
            "id": col(f_id, np.int64),
            "ph": pd.Categorical(np.array([chr(x) for x in f_ph], dtype=object)),
            "cat": pd.Categorical(flow_cats[col(f_cat, np.int32)]),
            "pid": col(f_pid, np.int64),
            "tid": col(f_tid, np.int64),
            "ts_us": col(f_ts, np.float64),
        })
        threads = pd.DataFrame(self.threads, columns=["pid", "tid", "kind", "label"])
        return events, flows, threads
