"""The compiled columnar scanner (``_scan.c``, optional): whole events of the text read straight into the
column store, no Python object per event.

It takes a batch only where its rows equal those of ``ColumnStore.add_event`` and declines anything else
(the batch is then decoded to dicts and added event by event); metadata events it leaves to ``add_event``.
"""

from __future__ import annotations

import json

import numpy as np

from labkit.trace.read.columns import DEVICE_CATS, RUNTIME_CATS, ColumnStore, LoadStats, category_kind

try:  # built by `pip install` where a C compiler is found
    from labkit.trace.read import _scan
except ImportError:  # pragma: no cover - depends on the build
    _scan = None

AVAILABLE = _scan is not None
if AVAILABLE:
    _scan.configure({c: category_kind(c) for c in ("Trace", *DEVICE_CATS, *RUNTIME_CATS)})
_NO_ROOM = -2


def add_scanned_batch(cols: ColumnStore, buf, start: int, end: int, i0: int, stats: LoadStats, *,
                      utf8: bool = False) -> int | None:
    """Read the events in ``buf[start:end]`` (whole ones separated by commas; traceEvents entries ``i0 ...``)
    into ``cols``: how many there were, or None when the scanner declines them (``cols`` and ``stats``
    untouched). Strings are interned in the order of the per-event path, so the tables are identical.
    ``utf8``: the caller has checked the bytes are UTF-8 (else only ASCII text is taken)."""
    while True:
        got = _scan.scan(buf, start, end, i0, cols.arrays, cols.n, utf8)
        if got != _NO_ROOM:
            break
        cols.reserve(max(2 * len(cols.arrays[0]), cols.n + (end - start) // 2 + 1))
    if got == -1:
        return None
    n_events, rows, flows, other, ts_float, ts_missing, cats, names, escaped, meta = got
    for k in escaped:
        names[k] = json.loads(f'"{names[k]}"')
    if rows:
        at = slice(cols.n, cols.n + rows)
        cat, name = cols.arrays[0], cols.arrays[1]
        cat[at] = np.array([cols.cat_code(c)[0] for c in cats], np.int32)[cat[at]]
        name[at] = cols.names.lookup(names).astype(np.int32)[name[at]]
        cols.n += rows
    for k, a, z in meta:
        cols.add_event(k, json.loads(bytes(buf[a:z])), stats)
    stats.n_complete += rows
    stats.n_flows += flows
    stats.n_other += other
    stats.ts_float |= ts_float
    stats.ts_missing |= ts_missing
    return n_events
