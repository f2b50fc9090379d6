"""Column store for loaded trace events: typed append-only arrays with interned strings.

The reader (``labkit.trace.read.reader``) hands decoded JSON events to a ``ColumnStore``
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
_I4, _I8, _F8, _I1 = np.int32, np.int64, np.float64, np.int8
#: dtype of each event column (the row layout above) and flow column
EVENT_DTYPES = (_I4, _I4, _I8, _I8, _F8, _F8, _I8, _I8, _I8, _I8, _I8, _I4, _I4, _I8)
FLOW_DTYPES = (_I8, _I1, _F8, _I8, _I8, _I4)


@dataclass
class LoadStats:
    """What the loader saw: counts by phase, skipped events and why, timestamp flavour."""

    n_events: int = 0  #: entries in traceEvents
    n_complete: int = 0  #: kept ``X`` events
    n_flows: int = 0
    n_other: int = 0  #: instant, counter and other phases (counted, not kept)
    skipped: int = 0  #: malformed events (see ``labkit.trace.read.load`` for the policy)
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


def cat_mask(values, wanted) -> np.ndarray:
    """Boolean mask of the rows of a Series whose value is in ``wanted``; for a categorical column (the
    loader's ``cat`` and ``name``) by a lookup of its codes, far faster than ``Series.isin``."""
    import pandas as pd

    if isinstance(values.dtype, pd.CategoricalDtype):
        hit = np.append(np.asarray(values.cat.categories.isin(list(wanted)), bool), False)  # code -1: missing
        return hit[values.cat.codes.to_numpy()]
    return values.isin(list(wanted)).to_numpy()


def column_strings(col) -> np.ndarray:
    """A column of the events table as an object array of str: a categorical's own strings, by its codes
    (far faster than ``astype(str)`` on a long column), else ``astype(str)``."""
    if hasattr(col, "cat") and not (col.cat.codes.to_numpy() < 0).any():
        return np.asarray(col.cat.categories, dtype=object)[col.cat.codes.to_numpy()]
    return col.astype(str).to_numpy()


def group_codes(*columns, sort: bool = False) -> tuple[np.ndarray, list]:
    """Group rows by equal values of ``columns`` (sequences of hashable, non-missing values) with a dict:
    ``(code of each row, key of each group)``, groups numbered in order of first appearance (``sort``: in
    key order), as pandas' ``groupby`` numbers them. Python caches a string's hash, so this is far faster
    than pandas' grouping on columns of long strings (kernel names, call sites); aggregate values with
    ``pd.Series(values).groupby(codes, sort=False)`` for the same sums."""
    groups: dict = {}
    code = np.array([groups.setdefault(k, len(groups)) for k in zip(*columns)], dtype=np.intp)
    keys = list(groups)
    if sort and keys:
        order = sorted(range(len(keys)), key=keys.__getitem__)
        rank = np.empty(len(keys), np.intp)
        rank[order] = np.arange(len(keys))
        code, keys = rank[code], [keys[i] for i in order]
    return code, keys


def category_kind(cat) -> int:
    """Which row layout a category gets: host, runtime (correlation), device (stream, bytes...) or ignored."""
    if cat == "Trace":
        return KIND_IGNORED
    return KIND_DEVICE if cat in DEVICE_CATS else KIND_RUNTIME if cat in RUNTIME_CATS else KIND_HOST


class ColumnStore:
    """Append-only column store: rows gather in ``rows``/``flows`` lists, ``flush()`` moves them into typed
    arrays. Each column is a list of numpy chunks (``chunks``/``flow_chunks``) joined once by ``frames()``;
    ``append_chunks`` adds a batch of whole columns (the struct path, ``labkit.trace.read.structs``)."""

    def __init__(self) -> None:
        self.chunks: list[list[np.ndarray]] = [[] for _ in EVENT_DTYPES]
        self.flow_chunks: list[list[np.ndarray]] = [[] for _ in FLOW_DTYPES]
        self.cats = Interner()
        self.names = Interner()
        self.dims = Interner()
        self.dims("")
        self.kind: dict[int, int] = {}  # cat code -> KIND_*
        self._kind_lut = np.zeros(0, np.int8)
        self._dim_cache: dict = {}  # launch dimensions as decoded (list as tuple, str, int, None) -> dims code
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

    def kinds_by_code(self) -> np.ndarray:
        """``KIND_*`` of every interned category, indexed by its code."""
        if len(self._kind_lut) != len(self.cats.values):
            self._kind_lut = np.array([self.kind[c] if c in self.kind else category_kind(v)
                                       for c, v in enumerate(self.cats.values)], dtype=np.int8)
        return self._kind_lut

    def dims_codes(self, values: list) -> list[int]:
        """Codes of launch dimensions as the struct path decodes them (lists of ints, strings, ints, None)."""
        keys = [tuple(v) if type(v) is list else v for v in values]
        cache = self._dim_cache
        codes = list(map(cache.get, keys))
        if None in codes:
            for j, c in enumerate(codes):
                if c is None:
                    c = cache.get(keys[j])
                    if c is None:
                        c = cache[keys[j]] = self.dims(_dims(values[j]))
                    codes[j] = c
        return codes

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

    @staticmethod
    def append_chunks(chunks: list, arrays, dtypes) -> None:
        """Append one array per column (equal lengths), each converted to its column's dtype."""
        for col, a, dt in zip(chunks, arrays, dtypes):
            col.append(np.asarray(a, dtype=dt))

    def flush(self, stats: LoadStats) -> None:
        """Move pending rows into the typed column chunks."""
        if self.rows:
            stats.n_complete += len(self.rows)
            self.append_chunks(self.chunks, zip(*self.rows), EVENT_DTYPES)
            self.rows = []
        if self.flows:
            stats.n_flows += len(self.flows)
            self.append_chunks(self.flow_chunks, zip(*self.flows), FLOW_DTYPES)
            self.flows = []

    @staticmethod
    def _joined(chunks: list, dtypes) -> list[np.ndarray]:
        """Each column as one array; a column's chunks are replaced by it as soon as it is joined, so
        only one column is held twice at a time."""
        out = []
        for c, dt in zip(chunks, dtypes):
            if len(c) > 1:
                c[:] = [np.concatenate(c)]
            out.append(c[0] if c else np.zeros(0, dt))
        return out

    def frames(self):
        """``(events, flows, threads)`` DataFrames (see ``labkit.trace.read.load`` for the columns)."""
        import pandas as pd

        (cat, name, pid, tid, ts, dur, stream, device, corr, ext, nbytes, grid, block,
         index) = self._joined(self.chunks, EVENT_DTYPES)
        dims = np.asarray(self.dims.values, dtype=object)
        events = pd.DataFrame({
            "cat": pd.Categorical.from_codes(cat, categories=self.cats.values),
            "name": pd.Categorical.from_codes(name, categories=self.names.values),
            "pid": pid,
            "tid": tid,
            "ts_us": ts,
            "dur_us": dur,
            "stream": stream,
            "device": device,
            "correlation": corr,
            "external_id": ext,
            "bytes": nbytes,
            "grid": dims[grid],
            "block": dims[block],
            "index": index,
        })
        f_id, f_ph, f_ts, f_pid, f_tid, f_cat = self._joined(self.flow_chunks, FLOW_DTYPES)
        flow_cats = np.asarray(self.cats.values, dtype=object)
        flows = pd.DataFrame({
            "id": f_id,
            "ph": pd.Categorical(np.array([chr(x) for x in f_ph.tolist()], dtype=object)),
            "cat": pd.Categorical(flow_cats[f_cat]),
            "pid": f_pid,
            "tid": f_tid,
            "ts_us": f_ts,
        })
        threads = pd.DataFrame(self.threads, columns=["pid", "tid", "kind", "label"])
        return events, flows, threads
