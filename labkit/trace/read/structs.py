"""Typed batch decoding of Kineto events with ``msgspec`` (optional), straight into the column store.

Only a clean batch is taken; otherwise the reader decodes it with ``json``, whose rules define the tables.
"""

from __future__ import annotations

from itertools import compress
from operator import not_
from typing import Any

import numpy as np

from labkit.trace.read.columns import (_BIG, KIND_DEVICE, KIND_HOST, KIND_IGNORED, ColumnStore, LoadStats,
                                       category_kind, int_or)

try:  # optional: typed decoding without per-event dicts
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - depends on the environment
    _msgspec = None

AVAILABLE = _msgspec is not None
_FLOW_PHASES = frozenset(("s", "f", "t"))

if AVAILABLE:
    _UNSET = _msgspec.UNSET
    _IntLike = int | str | None  # int_or reads these; a float or anything else declines the batch

    class Args(_msgspec.Struct, gc=False, frozen=True):
        """The ``args`` keys the column store reads (others are skipped by the decoder)."""

        correlation: _IntLike = -1
        stream: _IntLike = -1
        device: _IntLike = None
        bytes: _IntLike = -1
        name: Any = _UNSET  # metadata events: thread/process name
        sort_index: Any = _UNSET

    _EMPTY_ARGS = Args()

    class Event(_msgspec.Struct, gc=False):
        """One traceEvents entry, only the fields the column store reads."""

        ph: str | None = None
        cat: str | None = None
        name: str | None = None
        pid: _IntLike = None
        tid: _IntLike = None
        ts: int | float | None = None
        dur: int | float | None = None
        args: Args | None = _EMPTY_ARGS  # None only for an explicit "args": null

    _DECODER = _msgspec.json.Decoder(list[Event])
    _DECODE_ERRORS = (_msgspec.DecodeError,)  # ValidationError is a subclass
else:  # pragma: no cover - depends on the environment
    _DECODER = None
    _DECODE_ERRORS = ()

def decode_batch(text):
    """``text`` (a JSON array of events: str, bytes or a buffer) as ``Event`` structs, or None when msgspec is
    missing or declines it (syntax it does not accept, e.g. NaN, or a type the structs do not declare)."""
    if _DECODER is None:
        return None
    try:
        return _DECODER.decode(text)
    except _DECODE_ERRORS:
        return None


def _int_col(values) -> np.ndarray:
    """int64 column of ``int_or(v)`` for each value (-1 where it is not an int64-sized integer)."""
    try:  # ints, and numeric strings as int() reads them (msgspec gives only int, str or None here)
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # None, other strings, out of int64
        return np.array([int_or(v) for v in values], dtype=np.int64)


def add_struct_batch(cols: ColumnStore, batch: list, i0: int, stats: LoadStats) -> bool:
    """Add decoded ``Event`` structs (traceEvents entries ``i0 ...``) to ``cols`` column by column.

    Returns False, leaving ``cols`` and ``stats`` untouched, when the batch is not clean (module
    docstring). Strings are interned in the order of the per-event path, so the tables are identical."""
    n = len(batch)
    if not n:
        return True
    phs = [e.ph for e in batch]
    if phs.count("X") == n:
        xs, x_pos, others = batch, None, []
    else:
        is_x = [p == "X" for p in phs]
        xs, x_pos = list(compress(batch, is_x)), list(compress(range(n), is_x))
        others = list(compress(range(n), map(not_, is_x)))
    ts_types = {type(batch[k].ts) for k in others}
    flows = [k for k in others if phs[k] in _FLOW_PHASES]
    for k in flows:
        v = batch[k].ts
        if v is None or not -_BIG < v < _BIG:
            return False
    n_other = 0
    if xs:
        x_cats, x_names = [e.cat for e in xs], [e.name for e in xs]  # one pass per field: faster than tuples
        pid, tid = [e.pid for e in xs], [e.tid for e in xs]
        a_ts, a_dur = np.array([e.ts for e in xs]), np.array([e.dur for e in xs])
        # float64: some float (or mixed); int64: all plain ints; anything else (None, huge ints): decline
        if a_ts.dtype == np.float64:
            ts_types.add(float)
        elif a_ts.dtype != np.int64:
            return False
        if (a_dur.dtype != np.float64 and a_dur.dtype != np.int64) or None in x_names:
            return False
        a_ts, a_dur = a_ts.astype(np.float64, copy=False), a_dur.astype(np.float64, copy=False)
        if not (np.all(a_dur >= 0) and np.all(a_dur < _BIG) and np.all(np.abs(a_ts) < _BIG)):
            return False
        ucats = list(dict.fromkeys(x_cats))
        kinds_u = np.array([category_kind(c) for c in ucats], dtype=np.int8)
        where = {c: j for j, c in enumerate(ucats)}
        cat_ix = (np.array(list(map(where.__getitem__, x_cats)), dtype=np.intp) if len(ucats) > 1
                  else np.zeros(len(xs), np.intp))
        kinds = kinds_u[cat_ix]
        keep = kinds != KIND_IGNORED
        if not keep.all():  # the profiler's own span ("Trace"): counted, not kept
            n_other = int((~keep).sum())
            k = keep.tolist()
            x_cats, x_names, xs = list(compress(x_cats, k)), list(compress(x_names, k)), list(compress(xs, k))
            pid, tid = list(compress(pid, k)), list(compress(tid, k))
            x_pos = list(compress(x_pos if x_pos is not None else range(n), k))
            a_ts, a_dur, cat_ix, kinds = a_ts[keep], a_dur[keep], cat_ix[keep], kinds[keep]
        n_x = len(x_names)
        not_host = np.flatnonzero(kinds != KIND_HOST)
        dev_at = np.flatnonzero(kinds == KIND_DEVICE)
        try:
            pid_a, tid_a = _int_col(pid), _int_col(tid)
            corr_a, stream_a, device_a, bytes_a = (np.full(n_x, -1, np.int64) for _ in range(4))
            if len(not_host):
                nh_args = [xs[k].args or _EMPTY_ARGS for k in not_host.tolist()]  # host rows read no args
                corr_a[not_host] = _int_col([a.correlation for a in nh_args])
                on_dev = kinds[not_host] == KIND_DEVICE
                if on_dev.any():
                    d_args = list(compress(nh_args, on_dev.tolist()))
                    stream_a[dev_at] = _int_col([a.stream for a in d_args])
                    bytes_a[dev_at] = _int_col([a.bytes for a in d_args])
                    devs = [a.device for a in d_args]
                    device_a[dev_at] = pid_a[dev_at]  # no args.device: the process id
                    has = [j for j, v in enumerate(devs) if v is not None]
                    if has:
                        device_a[dev_at[has]] = _int_col([devs[j] for j in has])
        except OverflowError:
            return False
        # interning, in event order like ColumnStore.add_event
        cat_code = np.array([cols.cat_code(c)[0] if k != KIND_IGNORED else -1 for c, k in zip(ucats, kinds_u.tolist())],
                            dtype=np.int32)
        name_c = list(map(cols.names.codes.get, x_names))
        if None in name_c:
            interner = cols.names
            name_c = [c if c is not None else interner(s) for c, s in zip(name_c, x_names)]
        index_a = (np.arange(i0, i0 + n, dtype=np.int64) if x_pos is None else np.array(x_pos, dtype=np.int64) + i0)
        cols.append((cat_code[cat_ix], name_c, pid_a, tid_a, a_ts, a_dur, stream_a, device_a, corr_a, bytes_a,
                     index_a))
        stats.n_complete += n_x
    if len(others) > len(flows):
        flow_set = set(flows)
        for k in others:
            e = batch[k]
            if e.ph == "M":
                a = e.args
                label = ""
                if a is not None:
                    label = a.name if a.name is not _UNSET else (a.sort_index if a.sort_index is not _UNSET else "")
                cols.threads.append((int_or(e.pid), int_or(e.tid), str(e.name), str(label)))
            elif k not in flow_set:
                n_other += 1
    stats.n_flows += len(flows)
    stats.n_other += n_other
    if float in ts_types:
        stats.ts_float = True
    if type(None) in ts_types:
        stats.ts_missing = True
    return True
