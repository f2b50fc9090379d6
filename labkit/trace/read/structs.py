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
from operator import not_
from typing import Any

import numpy as np

from labkit.trace.read.columns import (_BIG, EVENT_DTYPES, FLOW_DTYPES, KIND_DEVICE, KIND_HOST, KIND_IGNORED, ColumnStore,
                                  LoadStats, category_kind, int_or)

try:  # optional: typed decoding without per-event dicts
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - depends on the environment
    _msgspec = None

AVAILABLE = _msgspec is not None

if AVAILABLE:
    _UNSET = _msgspec.UNSET
    _IntLike = int | str | None  # int_or reads these; a float or anything else declines the batch

    #: launch dimensions as Kineto writes them; anything else (floats, nested lists, objects) declines the batch
    _DimsLike = list[int] | str | int | None

    class Args(_msgspec.Struct, gc=False, frozen=True):
        """The ``args`` keys the column store reads (others are skipped by the decoder)."""

        correlation: _IntLike = -1
        external_id: _IntLike = _msgspec.field(default=-1, name="External id")
        stream: _IntLike = -1
        device: _IntLike = None
        bytes: _IntLike = -1
        grid: _DimsLike = None
        block: _DimsLike = None
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
        id: _IntLike = None
        args: Args | None = _EMPTY_ARGS  # None only for an explicit "args": null

    _DECODER = _msgspec.json.Decoder(list[Event])
    _DECODE_ERRORS = (_msgspec.DecodeError,)  # ValidationError is a subclass
else:  # pragma: no cover - depends on the environment
    _DECODER = None
    _DECODE_ERRORS = ()

_FLOW_PHASES = frozenset(("s", "f", "t"))


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
    attributes, then numpy); categories, names and launch dimensions the store already knows are
    looked up, not interned again."""
    if not batch:
        return True
    n = len(batch)
    # 1. checks that may decline the batch (nothing is modified before they pass)
    phs = [e.ph for e in batch]
    n_x = phs.count("X")
    if n_x == n:
        xs, x_pos, others = batch, None, []
    else:
        is_x = [p == "X" for p in phs]
        xs = list(compress(batch, is_x))
        x_pos = list(compress(range(n), is_x))
        others = list(compress(range(n), map(not_, is_x)))
    ts_types = {type(batch[k].ts) for k in others}
    flow_idx = [k for k in others if phs[k] in _FLOW_PHASES]
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
        a_ts, a_dur = a_ts.astype(np.float64, copy=False), a_dur.astype(np.float64, copy=False)
        if not (np.all(a_dur >= 0) and np.all(a_dur < _BIG) and np.all(np.abs(a_ts) < _BIG)):
            return False
    x_names = [e.name for e in xs]
    name_c = list(map(cols.names.codes.get, x_names))
    new_names = None in name_c
    if new_names and None in x_names:  # a complete event without a name is malformed: the json path counts it
        return False
    x_cats = [e.cat for e in xs]
    cat_c = list(map(cols.cats.codes.get, x_cats))
    if None in cat_c:  # a category the store has not seen (or "Trace"): kinds from the category names
        cat_c = None
        ucats = list(dict.fromkeys(x_cats))
        where = {c: j for j, c in enumerate(ucats)}
        cat_ix = np.array(list(map(where.__getitem__, x_cats)), dtype=np.intp)
        kinds = np.array([category_kind(c) for c in ucats], dtype=np.int8)[cat_ix]
    else:
        cat_ix = np.array(cat_c, dtype=np.intp)
        kinds = cols.kinds_by_code()[cat_ix]
    n_other = 0
    ignored = kinds == KIND_IGNORED
    if ignored.any():  # the profiler's own span ("Trace"): counted, not kept
        keep = (~ignored).tolist()
        n_other = n_x - sum(keep)
        xs = list(compress(xs, keep))
        x_pos = list(compress(x_pos if x_pos is not None else range(n), keep))
        x_cats = list(compress(x_cats, keep))
        x_names = list(compress(x_names, keep))
        name_c = list(compress(name_c, keep))
        a_ts, a_dur, cat_ix, kinds = a_ts[~ignored], a_dur[~ignored], cat_ix[~ignored], kinds[~ignored]
        n_x = len(xs)
    host_k = kinds == KIND_HOST
    dev_at = np.flatnonzero(kinds == KIND_DEVICE)
    try:
        ext_a = [e.args.external_id for e in xs]
        args = None
    except AttributeError:  # "args": null somewhere: read as {}
        args = [e.args or _EMPTY_ARGS for e in xs]
        ext_a = [a.external_id for a in args]
    not_host = np.flatnonzero(~host_k)
    if args is None:
        nh_args = [xs[k].args for k in not_host.tolist()] if len(not_host) < n_x else [e.args for e in xs]
    else:
        nh_args = [args[k] for k in not_host.tolist()] if len(not_host) < n_x else args
    dargs = nh_args if len(dev_at) == len(not_host) else [a for a, k in zip(nh_args, kinds[not_host].tolist())
                                                           if k == KIND_DEVICE]
    try:
        ext_a = _int_col(ext_a)
        pid = _int_col([e.pid for e in xs])
        tid = _int_col([e.tid for e in xs])
        corr_a = np.full(n_x, -1, np.int64)  # host events carry none (as in ColumnStore.add_event)
        corr_a[not_host] = _int_col([a.correlation for a in nh_args])
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
    index_a = (np.arange(i0, i0 + n, dtype=np.int64) if x_pos is None
               else np.array(x_pos, dtype=np.int64) + i0)

    # 2. interning, in event order like ColumnStore.add_event
    f_cats = [e.cat for e in fl]
    f_cat_c = list(map(cols.cats.codes.get, f_cats))
    if cat_c is None or None in f_cat_c:
        if cat_c is None and flow_idx:
            order = sorted((x_pos if x_pos is not None else list(range(n))) + flow_idx)
            cat_seq = [batch[k].cat for k in order]
        else:
            cat_seq = x_cats if cat_c is None else f_cats
        cat_code = {c: cols.cat_code(c)[0] for c in dict.fromkeys(cat_seq)}
        if cat_c is None:
            cat_ix = np.array([cat_code.get(c, -1) for c in ucats], dtype=np.intp)[cat_ix]  # -1: dropped above
        f_cat_c = [cat_code[c] if k is None else k for c, k in zip(f_cats, f_cat_c)]
    if new_names:
        interner = cols.names
        name_c = [c if c is not None else interner(s) for c, s in zip(name_c, x_names)]
    grid_c = np.zeros(n_x, dtype=np.int32)
    block_c = np.zeros(n_x, dtype=np.int32)
    if len(dev_at):
        grid_c[dev_at] = cols.dims_codes([a.grid for a in dargs])
        block_c[dev_at] = cols.dims_codes([a.block for a in dargs])
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
    cols.append_chunks(cols.chunks, (cat_ix, name_c, pid, tid, a_ts, a_dur, stream_a, device_a, corr_a, ext_a,
                                     bytes_a, grid_c, block_c, index_a), EVENT_DTYPES)
    if flow_idx:
        cols.append_chunks(cols.flow_chunks, (f_id, [ord(e.ph) for e in fl], [e.ts for e in fl], f_pid, f_tid,
                                              f_cat_c), FLOW_DTYPES)
    cols.threads.extend(threads)
    stats.n_complete += n_x
    stats.n_flows += len(flow_idx)
    stats.n_other += n_other
    if float in ts_types:
        stats.ts_float = True
    if type(None) in ts_types:
        stats.ts_missing = True
    return True
