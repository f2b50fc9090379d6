"""Column store of loaded trace events (typed arrays, interned strings), load statistics, table helpers.

See docs/trace-analyzer.md ("Reading a trace").
"""

from __future__ import annotations

import ctypes
import math
import mmap
import platform
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

#: categories of device activity that occupy a stream (HTA's kernel categories)
BUSY_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
#: categories whose events live on the device timeline
DEVICE_CATS = BUSY_CATS + ("cuda_sync", "gpu_user_annotation")
#: categories of host calls into the CUDA runtime/driver that carry a correlation id
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")

KIND_HOST, KIND_RUNTIME, KIND_DEVICE, KIND_IGNORED = 0, 1, 2, 3
_NUM = (int, float)
_BIG = 1e308  #: |ts|, dur at or beyond this are not finite floats (huge ints included)
_I4, _I8, _F8 = np.int32, np.int64, np.float64
EVENT_COLUMNS = ("cat", "name", "pid", "tid", "ts_us", "dur_us", "stream", "device", "correlation", "bytes", "index")
EVENT_DTYPES = (_I4, _I4, _I8, _I8, _F8, _F8, _I8, _I8, _I8, _I8, _I8)
_I64 = 1 << 63
_MAPPED_BYTES = 1 << 22  #: reservations from this size on get their own mapping (numpy's huge-page threshold)


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
    parts: int = 1  #: byte ranges the event array was read in (``jobs``)

    def skip(self, index: int, reason: str) -> None:
        self.skipped += 1
        self.skip_reasons[reason] += 1
        if len(self.first_skipped) < 5:
            self.first_skipped.append((index, reason))

    def add(self, other: "LoadStats", offset: int) -> None:
        """Add the counts of ``other``, a later part of the same array whose first event is ``offset``."""
        for k in ("n_events", "n_complete", "n_flows", "n_other", "skipped", "non_objects", "bytes_read"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.skip_reasons.update(other.skip_reasons)
        self.first_skipped = (self.first_skipped + [(i + offset, r) for i, r in other.first_skipped])[:5]
        self.ts_float |= other.ts_float
        self.ts_missing |= other.ts_missing


class Interner:
    """Map strings to small int codes, in order of first appearance."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.values: list[str] = []

    def __call__(self, s) -> int:
        if type(s) is not str:
            s = "" if s is None else str(s)
        code = self.codes.get(s)
        if code is None:
            code = self.codes[s] = len(self.values)
            self.values.append(s)
        return code

    def lookup(self, values: list[str]) -> np.ndarray:
        """The codes of ``values`` (strings of another interner), interning new ones in their order."""
        return np.array([self(v) for v in values], dtype=np.int64)


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
    return "negative duration" if dur < 0 else "non-finite ts/dur"


def category_kind(cat) -> int:
    """Which row layout a category gets: host, runtime (correlation), device (stream, bytes...) or ignored."""
    if cat == "Trace":
        return KIND_IGNORED
    return KIND_DEVICE if cat in DEVICE_CATS else KIND_RUNTIME if cat in RUNTIME_CATS else KIND_HOST


def cat_mask(values, wanted) -> np.ndarray:
    """Boolean mask of the rows of a Series whose value is in ``wanted``; for a categorical column (the
    loader's ``cat`` and ``name``) by a lookup of its codes, far faster than ``Series.isin``."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        hit = np.asarray(values.cat.categories.isin(list(wanted)), bool)
        codes = values.cat.codes.to_numpy()
        if hit.sum() > 8:  # a lookup per row; for a few codes, one comparison each is faster
            return np.append(hit, False)[codes]  # code -1: missing
        mask = np.zeros(len(codes), bool)
        for c in np.flatnonzero(hit).tolist():
            mask |= codes == c
        return mask
    return values.isin(list(wanted)).to_numpy()


def name_mask(values, rx) -> np.ndarray:
    """Rows of a categorical name column whose name the compiled regex ``rx`` finds (``search``)."""
    return cat_mask(values, [c for c in values.cat.categories if rx.search(c)])


def column_strings(col) -> np.ndarray:
    """A column of the events table as an object array of str (a categorical's own strings, by its codes)."""
    if hasattr(col, "cat") and not (col.cat.codes.to_numpy() < 0).any():
        return np.asarray(col.cat.categories, dtype=object)[col.cat.codes.to_numpy()]
    return col.astype(str).to_numpy()


def _factorize(values: np.ndarray) -> tuple[np.ndarray, int]:
    """``(code of each value, number of distinct values)``, codes in order of first appearance. Strings by a
    dict of them (Python keeps each string's hash; pandas hashes every row's UTF-8 bytes anew)."""
    if values.dtype == object:
        first = dict.fromkeys(values.tolist())
        if all(type(k) is str or k is None for k in first):
            at = {k: i for i, k in enumerate(first)}
            return np.fromiter(map(at.__getitem__, values.tolist()), np.int64, len(values)), len(at)
    part, uniq = pd.factorize(values, use_na_sentinel=False)
    return part, len(uniq)


def group_codes(*columns, sort: bool = False) -> tuple[np.ndarray, list]:
    """Group rows by equal values of ``columns`` (lists or arrays): ``(code of each row, key of each group)``,
    groups numbered in order of first appearance (``sort``: in key order), as pandas' ``groupby``
    numbers them, far faster on long strings (one hashing pass per column, no per-row tuples);
    aggregate with ``pd.Series(v).groupby(codes, sort=False)``."""
    cols = [c if isinstance(c, np.ndarray) else np.asarray(c, dtype=object) for c in columns]
    code = np.zeros(len(cols[0]), np.int64)
    for c in cols:  # the groups so far split by this column, still numbered by first appearance
        part, n_uniq = _factorize(c)
        code = pd.factorize(code * n_uniq + part)[0]
    first = np.unique(code, return_index=True)[1]
    keys = list(zip(*(c[first].tolist() for c in cols)))
    if sort and keys:
        order = sorted(range(len(keys)), key=keys.__getitem__)
        rank = np.empty(len(keys), np.intp)
        rank[order] = np.arange(len(keys))
        code, keys = rank[code], [keys[i] for i in order]
    return code, keys


def mapped(size: int, dtype, *, shared: bool = False) -> np.ndarray:
    """An array of ``size`` elements (at least one) on its own anonymous mapping, its pages given memory when
    first written, 4 KiB at a time; ``shared``: also the memory of processes forked after it is made."""
    flags = (mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE) | mmap.MAP_ANONYMOUS
    return np.frombuffer(mmap.mmap(-1, max(size, 1) * np.dtype(dtype).itemsize, flags=flags), dtype)


#: what ``keep_freed_memory`` asks of glibc's allocator: arrays up to this size from its heap (the most it
#: takes), and this much freed heap kept for the next ones
HEAP_ARRAY_BYTES = 32 << 20
KEEP_FREED_BYTES = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def keep_freed_memory() -> str:
    """Process-wide, for a process that analyses large traces (labkit's trace commands call it first; the
    library never does on its own): glibc's allocator serves arrays up to ``HEAP_ARRAY_BYTES`` from its heap
    and keeps up to ``KEEP_FREED_BYTES`` of freed heap for the next ones, and numpy stops advising huge
    pages. The analyses make many short-lived arrays of one element per event; on new mappings each first
    write asks the kernel for memory page by page (with the advice, after compacting memory for huge pages):
    a third or more of the analyses' time on a 1 GB trace (docs/analyzer-profile.md). Returns what it changed."""
    done = []
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        mallopt = ctypes.CDLL(None).mallopt
        if mallopt(_M_MMAP_THRESHOLD, HEAP_ARRAY_BYTES) and mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES):
            done.append("glibc heap reuse")
    advice = getattr(getattr(np, "_core", None), "multiarray", None)
    if hasattr(advice, "_set_madvise_hugepage"):
        advice._set_madvise_hugepage(False)
        done.append("no huge-page advice")
    return ", ".join(done) or "unchanged"


def _reserved(size: int, dtype) -> np.ndarray:
    """Room for ``size`` elements: a large one ``mapped``. numpy's allocator asks Linux for huge pages on large
    arrays, and where the kernel then compacts memory to find them (``transparent_hugepage/defrag`` at
    ``madvise``) writing into a sparse reservation stalls on it (docs/analyzer-profile.md)."""
    if size * np.dtype(dtype).itemsize < _MAPPED_BYTES or not hasattr(mmap, "MAP_ANONYMOUS"):  # Windows: numpy's
        return np.empty(size, dtype)
    return mapped(size, dtype)


def _grown(a: np.ndarray, lo: int, n: int, size: int) -> np.ndarray:
    """A new array of ``size`` elements holding ``a[lo:n]`` at the same place (the rest unwritten)."""
    out = _reserved(size, a.dtype)
    out[lo:n] = a[lo:n]
    return out


class ColumnStore:
    """Append-only column store: rows gather in ``rows``, ``flush()`` moves them into the typed columns;
    ``append`` adds a batch of whole columns. Each column is one array with room to spare (``reserve``:
    pages never written cost no memory), filled in place, so no step joins chunks into a second copy."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = [np.empty(0, dt) for dt in EVENT_DTYPES]
        self.lo = self.n = 0  #: events held: ``lo`` to ``n`` of each array (room before ``lo`` is never written)
        self.cats = Interner()
        self.names = Interner()
        self.kind: dict[int, int] = {}  # cat code -> KIND_*
        self.threads: list[tuple] = []
        self.rows: list[tuple] = []

    def cat_code(self, cat) -> tuple[int, int]:
        """``(code, kind)`` of a category."""
        c = self.cats(cat)
        k = self.kind.get(c)
        if k is None:
            k = self.kind[c] = category_kind(cat)
        return c, k

    def add_event(self, i: int, e, stats: LoadStats) -> None:
        """Add one decoded traceEvents entry (any phase); malformed ones are counted in ``stats``.
        These per-event rules define the tables; the compiled scanner (``scan``) reproduces them."""
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
            row = [c, self.names(e["name"]), int_or(e.get("pid")), int_or(e.get("tid")), ts, dur, -1, -1, -1, -1, i]
            if k != KIND_HOST:
                args = args or {}
                row[8] = int_or(args.get("correlation"))
                if k == KIND_DEVICE:
                    dev = args.get("device")
                    row[6], row[7] = int_or(args.get("stream")), int_or(dev) if dev is not None else row[2]
                    row[9] = int_or(args.get("bytes"))
            self.rows.append(row)
        elif ph == "s" or ph == "f" or ph == "t":
            if not ((tt is float or tt is int) and -_BIG < ts < _BIG):
                stats.skip(i, "flow event without numeric ts")
                return
            stats.n_flows += 1
        elif ph == "M":
            args = e.get("args")
            label = args.get("name", args.get("sort_index", "")) if type(args) is dict else ""
            self.threads.append((int_or(e.get("pid")), int_or(e.get("tid")), str(e.get("name")), str(label)))
        else:
            stats.n_other += 1

    def reserve(self, events: int) -> None:
        """Room for ``events`` events in all (a hint: the store grows past it when needed)."""
        if events > len(self.arrays[0]):
            self.arrays = [_grown(a, self.lo, self.n, events) for a in self.arrays]

    def append(self, arrays) -> None:
        """Append one array per column (equal lengths), each converted to its column's dtype."""
        arrays = [np.asarray(a, dtype=dt) for a, dt in zip(arrays, EVENT_DTYPES)]
        n, m = self.n, len(arrays[0])
        if n + m > len(self.arrays[0]):
            self.reserve(max(2 * len(self.arrays[0]), n + m, 1 << 12))
        for col, a in zip(self.arrays, arrays):
            col[n:n + m] = a
        self.n = n + m

    def flush(self, stats: LoadStats) -> None:
        """Move pending rows into the typed columns."""
        if self.rows:
            stats.n_complete += len(self.rows)
            self.append(zip(*self.rows))
            self.rows = []

    def columns(self) -> list[np.ndarray]:
        """Each column as one array (views of the held ones)."""
        return [a[self.lo:self.n] for a in self.arrays]

    def extend(self, part: tuple, index_offset: int, *, in_place: bool = False) -> None:
        """Append a later part of the same array read by another store (``part()`` of it): its strings are
        interned here in their order of first appearance, so codes and categories are those of one read.
        ``in_place``: the part's rows already lie in this store's arrays right after its own (the other
        store shares them): only their codes and indices change."""
        (cat, name, *rest, index), cats, names, threads = part
        maps = [m.astype(dt) for m, dt in ((self.cats.lookup(cats), EVENT_DTYPES[0]),
                                           (self.names.lookup(names), EVENT_DTYPES[1]))]
        for code, value in zip(maps[0].tolist(), cats):
            self.kind.setdefault(code, category_kind(value))
        n, m = self.n, len(cat)
        if not in_place and n + m > len(self.arrays[0]):
            self.reserve(max(2 * len(self.arrays[0]), n + m, 1 << 12))
        out = [a[n:n + m] for a in self.arrays]  # written in place: no temporary column
        for codes, code_map, dst in zip((cat, name), maps, out):
            if not np.array_equal(code_map, np.arange(len(code_map))):  # else the codes are already this store's
                np.take(code_map, codes, out=dst, mode="clip")  # (codes index their own table: clip never acts)
            elif not in_place:
                dst[:] = codes
        if not in_place:
            for col, dst in zip(rest, out[2:-1]):
                dst[:] = col
        np.add(index, index_offset, out=out[-1])
        self.n = n + m
        self.threads.extend(threads)

    def part(self) -> tuple:
        """What ``extend`` takes: the columns, the interned strings and the thread names."""
        return self.columns(), self.cats.values, self.names.values, self.threads

    def frames(self):
        """``(events, threads)`` DataFrames (see ``labkit.trace.read.load`` for the columns)."""
        cat, name, *rest = self.columns()
        events = pd.DataFrame({"cat": pd.Categorical.from_codes(cat, categories=self.cats.values),
                               "name": pd.Categorical.from_codes(name, categories=self.names.values),
                               **dict(zip(EVENT_COLUMNS[2:], rest))}, copy=False)  # one block per column: no copy
        return events, pd.DataFrame(self.threads, columns=["pid", "tid", "kind", "label"])
