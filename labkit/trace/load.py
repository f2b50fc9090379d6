"""Streaming loader for PyTorch profiler (Kineto) Chrome-trace JSON into tidy tables.

``load_trace(path)`` reads ``.json`` or ``.json.gz`` (gzip is detected by its magic bytes)
without decoding the whole document at once: ``labkit.trace.reader`` walks the
``traceEvents`` array about 1 MiB of text at a time with a fast scanner for the common Kineto
event shapes and an exact JSON path for everything else, and ``labkit.trace.columns`` keeps
only the fields the analyses need in compact column arrays with interned strings. Memory
stays bounded by the kept columns plus one buffer, not by the size of the file.

Policy for bad input:

* a file that is not (gzip'ed) UTF-8 JSON, is truncated, or has no ``traceEvents`` array is
  rejected with a ``UsageError`` whose one-line message names the problem and, where it
  applies, the index of the event being read;
* single events that are malformed (not an object, ``X`` events without a numeric finite
  ``ts``/``dur``, negative durations) are skipped and counted in ``Trace.stats``
  (``skipped`` and the first few reasons), and a warning is logged.

Columns of ``Trace.events`` (one row per complete ``ph: "X"`` event, file order):
``cat``, ``name`` (categoricals), ``pid``, ``tid`` (int64; -1 where the trace used a
non-integer label), ``ts_us``, ``dur_us`` (float64 microseconds), ``stream``, ``device``,
``correlation``, ``external_id``, ``bytes`` (int64; -1 where absent), ``grid``, ``block``
(strings like ``"128,1,1"`` or empty), ``index`` (position in ``traceEvents``). ``Trace.flows`` holds flow events (``s``/``f``/``t``)
and ``Trace.threads`` the process/thread names from metadata events.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.columns import BUSY_CATS, DEVICE_CATS, RUNTIME_CATS, ColumnStore, LoadStats
from labkit.trace.reader import read_document

__all__ = ["BUSY_CATS", "DEVICE_CATS", "RUNTIME_CATS", "LoadStats", "Trace", "as_trace", "load_trace"]

logger = logging.getLogger(__name__)


@dataclass
class Trace:
    """A loaded trace: events, flows and thread names as DataFrames, plus top-level metadata."""

    events: "object"  # pandas.DataFrame
    flows: "object"  # pandas.DataFrame
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
        cats = self.events["cat"]
        return bool(cats.isin(BUSY_CATS).any())


def load_trace(path: str | os.PathLike) -> Trace:
    """Load a Kineto trace file (``.json`` or gzip'ed) into a ``Trace``.

    Raises ``UsageError`` with a one-line reason when the file is unreadable, truncated,
    not JSON, or has no ``traceEvents`` array. Malformed single events are skipped and
    counted (``Trace.stats``).
    """
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{str(path)!r} is a folder, not a trace file")
    cols = ColumnStore()
    stats = LoadStats()
    metadata, found = read_document(path, cols, stats)
    if not found:
        raise UsageError(f"not a trace: {path.name} has no traceEvents array")
    if stats.skipped:
        logger.warning("%s: skipped %d malformed events (first: %s)", path.name, stats.skipped, stats.first_skipped[:1])
    events, flows, threads = cols.frames()
    return Trace(events=events, flows=flows, threads=threads, metadata=metadata, stats=stats, path=str(path))


def as_trace(obj) -> Trace:
    """A ``Trace`` from a path or a ``Trace`` (returned as is)."""
    if isinstance(obj, Trace):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return load_trace(obj)
    raise UsageError(f"expected a trace path or Trace, got {type(obj).__name__}")
