"""Loading a trace: ``load_trace`` / ``as_trace`` into ``EventTables`` (column tables), and the bad-input policy.

Details: docs/trace-analyzer.md ("Reading a trace").
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.read.columns import BUSY_CATS, DEVICE_CATS, RUNTIME_CATS, ColumnStore, LoadStats, cat_mask
from labkit.trace.read.document import read_document

__all__ = ["BUSY_CATS", "DEVICE_CATS", "MALFORMED_LIMIT", "RUNTIME_CATS", "EventTables", "LoadStats", "as_trace",
           "check_malformed", "load_trace", "trace_from_document"]

logger = logging.getLogger(__name__)

#: largest share of malformed events a trace may have and still be read without ``skip_malformed``
MALFORMED_LIMIT = 0.001


@dataclass
class EventTables:
    """A loaded trace's events and thread names as DataFrames, plus its top-level metadata (what
    ``labkit.trace.Trace`` analyses)."""

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
               jobs: int = 1) -> EventTables:
    """Load a Kineto trace file (``.json`` or gzip'ed) into ``EventTables``.

    Raises ``UsageError`` with a one-line reason when the file is unreadable, truncated,
    not JSON, has no ``traceEvents`` array or no event objects, or has more than
    ``MALFORMED_LIMIT`` malformed events (unless ``skip_malformed``); malformed events at or
    below the limit are skipped and counted (``EventTables.stats``). ``progress``: show a bar on
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
    return EventTables(events=events, threads=threads, metadata=metadata, stats=stats, path=str(path))


def trace_from_document(doc, *, name: str = "<document>", skip_malformed: bool = False) -> EventTables:
    """``EventTables`` from an already decoded Chrome-trace document (a dict with ``traceEvents``, or a
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
    return EventTables(events=ev, threads=threads, metadata=metadata, stats=stats, path=None)


def as_trace(obj, *, skip_malformed: bool = False, jobs: int = 1) -> EventTables:
    """``EventTables`` from a path (read with ``load_trace``), a decoded document (dict or event list),
    ``EventTables`` (returned as is) or a ``labkit.trace.Trace`` (its tables, read once)."""
    if isinstance(obj, EventTables):
        return obj
    if isinstance(getattr(obj, "tables", None), EventTables):
        return obj.tables
    if isinstance(obj, (str, os.PathLike)):
        return load_trace(obj, skip_malformed=skip_malformed, jobs=jobs)
    if isinstance(obj, (dict, list)):
        return trace_from_document(obj, skip_malformed=skip_malformed)
    raise UsageError(f"expected a trace path, Trace or EventTables, got {type(obj).__name__}")
