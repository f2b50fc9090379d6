"""Typed batch decoding of Kineto events with ``msgspec`` (optional) straight into the column store.

``msgspec`` decodes a batch of event text into small typed structs (``Event``, ``Args``) that
declare only the fields the column store keeps; every other key is skipped inside the C
decoder, so no per-event Python dict is built. ``add_struct_batch`` then fills the columns of a
``ColumnStore`` with list comprehensions over attributes.

The path is exact by construction: a batch is taken only when it is *clean* (every value has
the type the stdlib path expects, every complete event has finite ``ts``/``dur`` with
``dur >= 0``, integers fit in int64). Anything else -- a type the structs do not declare, a
skipped event, an overflow -- makes ``decode_batch`` or ``add_struct_batch`` decline the batch
(without touching the store), and the reader decodes that batch with ``json`` and the per-event
``ColumnStore.add_event``, whose rules define the result. ``AVAILABLE`` is False when
``msgspec`` is not installed; the reader then uses the stdlib path only.
"""

from __future__ import annotations

from itertools import compress
from typing import Any

import numpy as np

from labkit.trace.columns import (_BIG, KIND_DEVICE, KIND_HOST, ColumnStore, LoadStats, _dims,
                                  category_kind, int_or)

try:  # optional: typed decoding without per-event dicts
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - depends on the environment
    _msgspec = None

AVAILABLE = _msgspec is not None

if AVAILABLE:
    _UNSET = _msgspec.UNSET
    _IntLike = int | str | None  # int_or reads these; a float or anything else declines the batch

    class Args(_msgspec.Struct, gc=False):
        """The ``args`` keys the column store reads (others are skipped by the decoder)."""

        correlation: _IntLike = -1
        external_id: _IntLike = _msgspec.field(default=-1, name="External id")
        stream: _IntLike = -1
        device: _IntLike = None
        bytes: _IntLike = -1
        grid: Any = None
        block: Any = None
        name: Any = _UNSET  # metadata events: thread/process name
        sort_index: Any = _UNSET

    class Event(_msgspec.Struct, gc=False):
        """One traceEvents entry, only the fields the column store reads."""

        ph: str | None = None
        cat: str | None = None
        name: str | None = None
        pid: _IntLike = None
        tid: _IntLike = None
        ts: int | float | None = None
        dur: int | float | None = None
        id: _IntLike = None
        args: Args | None = None

    _EMPTY_ARGS = Args()
    _DECODER = _msgspec.json.Decoder(list[Event])
    _DECODE_ERRORS = (_msgspec.DecodeError,)  # ValidationError is a subclass
else:  # pragma: no cover - depends on the environment
    _DECODER = None
    _DECODE_ERRORS = ()

_DTYPES = {"b": np.int8, "i": np.int32, "q": np.int64, "d": np.float64}


def decode_batch(text: str):
    """``text`` (a JSON array of events) as a list of ``Event`` structs, or None when msgspec is
    missing or declines it (syntax it does not accept, e.g. NaN, or a type the structs do not
    declare); the caller then uses ``json``."""
    if _DECODER is None:
        return None
    try:
        return _DECODER.decode(text)
    except _DECODE_ERRORS:
        return None


def _int_col(values: list) -> np.ndarray:
    """int64 column of ``int_or(v)`` for each value (-1 where it is not an int64-sized integer)."""
    if not values:
        return np.zeros(0, np.int64)
    try:  # ints, and numeric strings as int() reads them (msgspec gives only int, str or None here)
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # None, other strings, out of int64
        return np.array([int_or(v) for v in values], dtype=np.int64)


def add_struct_batch(cols: ColumnStore, batch: list, i0: int, stats: LoadStats) -> bool:
    """Add decoded ``Event`` structs (traceEvents entries ``i0 ...``) to ``cols``.

    Returns False, leaving ``cols`` and ``stats`` untouched, when the batch is not clean (see the
    module docstring): the caller then adds it event by event from ``json``-decoded dicts. Strings
    are interned in the same order as the per-event path, so the tables are identical. The
    per-row rules of ``ColumnStore.add_event`` are applied column-wise (list comprehensions over
    attributes, then numpy)."""
    if not batch:
        return True
    # 1. checks that may decline the batch (nothing is modified before they pass)
    phs = [e.ph for e in batch]
    n_x = phs.count("X")
    if n_x == len(batch):
        xs, x_idx, others = batch, None, []
    else:
        x_idx = [k for k, p in enumerate(phs) if p == "X"]
        xs = [batch[k] for k in x_idx]
        others = [k for k, p in enumerate(phs) if p != "X"]
    ts_o = [batch[k].ts for k in others]
    ts_types = set(map(type, ts_o))
    flow_idx = [k for k in others if phs[k] in ("s", "f", "t")]
    for k in flow_idx:
        v = batch[k].ts
        if v is None or not -_BIG < v < _BIG:
            return False
    a_ts = np.array([e.ts for e in xs])
    a_dur = np.array([e.dur for e in xs])
    if n_x:
        # float64: some float (or mixed); int64: all plain ints; anything else (None, huge ints): decline
        if a_ts.dtype == np.float64:
            ts_types.add(float)
        elif a_ts.dtype != np.int64:
            return False
        if a_dur.dtype != np.float64 and a_dur.dtype != np.int64:
            return False
        a_ts, a_dur = a_ts.astype(np.float64), a_dur.astype(np.float64)
        if not (np.all(a_dur >= 0) and np.all(a_dur < _BIG) and np.all(np.abs(a_ts) < _BIG)):
            return False
    x_cats = [e.cat for e in xs]
    x_names = [e.name for e in xs]
    if None in x_names:  # a complete event without a name is malformed: the json path counts it
        return False
    n_other = 0
    if "Trace" in x_cats:  # the profiler's own span: counted, not kept
        keep = [c != "Trace" for c in x_cats]
        n_other = len(keep) - sum(keep)
        mask = np.array(keep)
        xs = list(compress(xs, keep))
        x_idx = list(compress(x_idx if x_idx is not None else range(len(batch)), keep))
        x_cats = list(compress(x_cats, keep))
        x_names = list(compress(x_names, keep))
        a_ts, a_dur = a_ts[mask], a_dur[mask]
        n_x = len(xs)
    # categories as indices into this batch's distinct ones (one pass), then lookup tables
    ucats = list(dict.fromkeys(x_cats))
    if len(ucats) == 1:
        cat_ix = np.zeros(n_x, np.intp)
    else:
        where = {c: j for j, c in enumerate(ucats)}
        cat_ix = np.array(list(map(where.__getitem__, x_cats)), dtype=np.intp)
    kinds = np.array([category_kind(c) for c in ucats], dtype=np.int8)[cat_ix]
    host_k = kinds == KIND_HOST
    dev_k = kinds == KIND_DEVICE
    args = [e.args for e in xs]
    if None in args:
        args = [a or _EMPTY_ARGS for a in args]
    dev_at = np.flatnonzero(dev_k)
    dargs = [args[k] for k in dev_at.tolist()] if len(dev_at) < n_x else args
    try:
        pid = _int_col([e.pid for e in xs])
        tid = _int_col([e.tid for e in xs])
        corr_a = np.full(n_x, -1, np.int64)  # host events carry none (as in ColumnStore.add_event)
        not_host = np.flatnonzero(~host_k)
        corr_a[not_host] = _int_col([args[k].correlation for k in not_host.tolist()]) \
            if len(not_host) < n_x else _int_col([a.correlation for a in args])
        ext_a = _int_col([a.external_id for a in args])
        stream_a = np.full(n_x, -1, np.int64)
        stream_a[dev_at] = _int_col([a.stream for a in dargs])
        device_a = np.full(n_x, -1, np.int64)
        devs = [a.device for a in dargs]
        if None in devs:
            device_a[dev_at] = pid[dev_at]
            has = [k for k, d in enumerate(devs) if d is not None]
            device_a[dev_at[has]] = _int_col([devs[k] for k in has])
        else:
            device_a[dev_at] = _int_col(devs)
        bytes_a = np.full(n_x, -1, np.int64)
        bytes_a[dev_at] = _int_col([a.bytes for a in dargs])
        fl = [batch[k] for k in flow_idx]
        f_id, f_pid, f_tid = _int_col([e.id for e in fl]), _int_col([e.pid for e in fl]), _int_col([e.tid for e in fl])
    except OverflowError:
        return False
    index_a = (np.arange(i0, i0 + len(batch), dtype=np.int64) if x_idx is None
               else np.array(x_idx, dtype=np.int64) + i0)

    # 2. interning, in event order like ColumnStore.add_event
    if flow_idx:
        order = sorted((x_idx if x_idx is not None else list(range(len(batch)))) + flow_idx)
        cat_seq = [batch[k].cat for k in order]
    else:
        cat_seq = x_cats
    cat_code = {c: cols.cat_code(c)[0] for c in dict.fromkeys(cat_seq)}
    interner = cols.names
    name_c = list(map(interner.codes.get, x_names))
    if None in name_c:
        name_c = [c if c is not None else interner(n) for c, n in zip(name_c, x_names)]
    grid_c = np.zeros(n_x, dtype=np.int32)
    block_c = np.zeros(n_x, dtype=np.int32)
    if len(dev_at):
        dims = cols.dims
        cache: dict = {}

        def dim_code(v) -> int:
            key = tuple(v) if type(v) is list else v
            try:
                code = cache.get(key)
            except TypeError:  # unhashable (nested lists, objects): no cache
                return dims(_dims(v))
            if code is None:
                code = cache[key] = dims(_dims(v))
            return code

        codes = [(dim_code(a.grid), dim_code(a.block)) for a in dargs]
        g, b = zip(*codes)
        grid_c[dev_at] = g
        block_c[dev_at] = b
    if flow_idx:
        flow_new = [f_id, np.array([ord(e.ph) for e in fl], dtype=np.int8), np.array([e.ts for e in fl], dtype=np.float64),
                    f_pid, f_tid, np.array([cat_code[e.cat] for e in fl], dtype=np.int32)]
    threads = []
    if len(others) > len(flow_idx):
        flow_set = set(flow_idx)
        for k in others:
            e = batch[k]
            if e.ph == "M":
                a = e.args
                label = ""
                if a is not None:
                    label = a.name if a.name is not _UNSET else (a.sort_index if a.sort_index is not _UNSET else "")
                threads.append((int_or(e.pid), int_or(e.tid), str(e.name), str(label)))
            elif k not in flow_set:
                n_other += 1

    # 3. append
    new = [np.array([cat_code[c] for c in ucats], dtype=np.int32)[cat_ix], np.array(name_c, dtype=np.int32),
           pid, tid, a_ts, a_dur, stream_a, device_a, corr_a, ext_a, bytes_a, grid_c, block_c, index_a]
    for col, a in zip(cols.cols, new):
        col.frombytes(np.ascontiguousarray(a, dtype=_DTYPES[col.typecode]).view(np.uint8))
    if flow_idx:
        for col, a in zip(cols.flow_cols, flow_new):
            col.frombytes(np.ascontiguousarray(a, dtype=_DTYPES[col.typecode]).view(np.uint8))
    cols.threads.extend(threads)
    stats.n_complete += n_x
    stats.n_flows += len(flow_idx)
    stats.n_other += n_other
    if float in ts_types:
        stats.ts_float = True
    if type(None) in ts_types:
        stats.ts_missing = True
    return True
