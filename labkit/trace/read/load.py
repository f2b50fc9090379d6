"""Loading a trace: ``load_trace`` / ``as_trace`` into a ``Trace`` (column tables), and the bad-input policy.

A file that is not (gzip'ed) UTF-8 JSON with a ``traceEvents`` array of objects is a ``UsageError``
with a one-line reason; malformed single events are counted and skipped, and more than
``MALFORMED_LIMIT`` of them is an error unless ``skip_malformed``. ``Trace.events`` has one row per
complete ``X`` event in file order (``EVENT_COLUMNS`` of ``labkit.trace.read.columns``);
``Trace.threads`` the process/thread names. Details: docs/trace-analyzer.md ("Reading a trace").
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.read.columns import BUSY_CATS, DEVICE_CATS, RUNTIME_CATS, ColumnStore, LoadStats, cat_mask
from labkit.trace.read.document import read_document

__all__ = ["BUSY_CATS", "DEVICE_CATS", "MALFORMED_LIMIT", "RUNTIME_CATS", "LoadStats", "Trace", "as_trace",
           "check_malformed", "load_trace", "trace_from_document"]

logger = logging.getLogger(__name__)

#: largest share of malformed events a trace may have and still be read without ``skip_malformed``
MALFORMED_LIMIT = 0.001


@dataclass
class Trace:
    """A loaded trace: events and thread names as DataFrames, plus top-level metadata."""

    events: "object"  # pandas.DataFrame
    threads: "object"  # pandas.DataFrame: pid, tid, kind (process_name/thread_name/...), label
    metadata: dict
    stats: LoadStats
    path: str | None = None

    @property
    def device_names(self) -> list[str]:
        """GPU names from ``deviceProperties`` (may list devices without events)."""
        props = self.metadata.get("deviceProperties")
        if not isinstance(props, list):
            return []
        return [str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name") is not None]

    @property
    def is_simulated(self) -> bool:
        """True when the trace says it came from the lab's simulated device."""
        lab = self.metadata.get("labkit")
        if isinstance(lab, str):
            try:
                lab = json.loads(lab)
            except ValueError:
                lab = None
        if isinstance(lab, dict) and str(lab.get("source", "")).lower() == "simulated":
            return True
        if any("simulated" in n.lower() for n in self.device_names):
            return True
        labels = self.threads["label"] if len(self.threads) else []
        return any("simulated" in str(x).lower() for x in labels)

    def has_device_events(self) -> bool:
        return bool(cat_mask(self.events["cat"], BUSY_CATS).any())

    def once(self, key: str, build):
        """``build()``, computed once per loaded trace and kept on it (again if its events table was replaced);
        treat the value as read-only."""
        owner, value = self.__dict__.get("_once_" + key, (None, None))
        if owner is not self.events:
            value = build()
            self.__dict__["_once_" + key] = (self.events, value)
        return value


def check_malformed(stats: LoadStats, name: str, *, skip_malformed: bool = False) -> None:
    """Apply the malformed-event policy (docs/reference.md) to what the loader counted.

    Raises ``UsageError`` when no event is a JSON object (not a trace), or when more than
    ``MALFORMED_LIMIT`` of the events are malformed and ``skip_malformed`` is False."""
    if stats.n_events and stats.non_objects == stats.n_events:
        raise UsageError(f"not a trace: {name} has no event objects in traceEvents (first entry is not an object)")
    if not stats.skipped:
        return
    first = stats.first_skipped[0] if stats.first_skipped else (-1, "?")
    share = stats.skipped / max(stats.n_events, 1)
    if share > MALFORMED_LIMIT and not skip_malformed:
        raise UsageError(f"{name}: {stats.skipped} of {stats.n_events} events are malformed ({100 * share:.2f}%, "
                         f"over the {100 * MALFORMED_LIMIT:g}% limit); first: event {first[0]}: {first[1]} "
                         f"(--skip-malformed skips them)")
    logger.warning("%s: skipped %d malformed events (first: event %d: %s)", name, stats.skipped, first[0], first[1])


def load_trace(path: str | os.PathLike, *, skip_malformed: bool = False, progress: bool | None = None,
               jobs: int = 1) -> Trace:
    """Load a Kineto trace file (``.json`` or gzip'ed) into a ``Trace``.

    Raises ``UsageError`` with a one-line reason when the file is unreadable, truncated,
    not JSON, has no ``traceEvents`` array or no event objects, or has more than
    ``MALFORMED_LIMIT`` malformed events (unless ``skip_malformed``); malformed events at or
    below the limit are skipped and counted (``Trace.stats``). ``progress``: show a bar on
    stderr (None: for files over 50 MB when stderr is a terminal). ``jobs``: processes reading a large
    file as byte ranges of its event array (``labkit.trace.read.document``).
    """
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{str(path)!r} is a folder, not a trace file")
    cols = ColumnStore()
    stats = LoadStats()
    metadata, found = read_document(path, cols, stats, progress=progress, jobs=jobs)
    if not found:
        raise UsageError(f"not a trace: {path.name} has no traceEvents array")
    check_malformed(stats, path.name, skip_malformed=skip_malformed)
    events, threads = cols.frames()
    return Trace(events=events, threads=threads, metadata=metadata, stats=stats, path=str(path))


def trace_from_document(doc, *, name: str = "<document>", skip_malformed: bool = False) -> Trace:
    """A ``Trace`` from an already decoded Chrome-trace document (a dict with ``traceEvents``, or a
    list of events), with the same rules as ``load_trace``."""
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        metadata = {k: v for k, v in doc.items() if k != "traceEvents"}
    else:
        events, metadata = doc, {}
    if not isinstance(events, list):
        raise UsageError(f"not a trace: {name} has no traceEvents array")
    cols, stats = ColumnStore(), LoadStats()
    for i, e in enumerate(events):
        cols.add_event(i, e, stats)
    cols.flush(stats)
    stats.n_events, stats.found = len(events), True
    check_malformed(stats, name, skip_malformed=skip_malformed)
    ev, threads = cols.frames()
    return Trace(events=ev, threads=threads, metadata=metadata, stats=stats, path=None)


CACHE_SIZE = 6  #: traces loaded by path that ``as_trace`` keeps per process
CACHE_MAX_EVENTS = 300_000  #: larger traces are not kept
_CACHE: OrderedDict = OrderedDict()


def as_trace(obj, *, skip_malformed: bool = False, cache: bool = True, jobs: int = 1) -> Trace:
    """A ``Trace`` from a path, a decoded document (dict or event list) or a ``Trace`` (returned as is).

    ``cache``: a path whose file is unchanged since an earlier call in this process gives the same
    ``Trace`` again (a notebook reads one trace in several cells); traces of more than
    ``CACHE_MAX_EVENTS`` complete events are never kept. Treat a returned ``Trace`` as read-only.
    ``load_trace`` never caches."""
    if isinstance(obj, Trace):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        key = None
        if cache:
            try:
                st = os.stat(obj)
                key = (os.path.realpath(obj), st.st_mtime_ns, st.st_size, skip_malformed)
            except OSError:
                key = None  # load_trace says what is wrong
        if key is not None and key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
        trace = load_trace(obj, skip_malformed=skip_malformed, jobs=jobs)
        if key is not None and len(trace.events) <= CACHE_MAX_EVENTS:
            _CACHE[key] = trace
            while len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
        return trace
    if isinstance(obj, (dict, list)):
        return trace_from_document(obj, skip_malformed=skip_malformed)
    raise UsageError(f"expected a trace path or Trace, got {type(obj).__name__}")
