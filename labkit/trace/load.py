"""Streaming loader for PyTorch profiler (Kineto) Chrome-trace JSON into tidy tables.

``load_trace(path)`` reads ``.json`` or ``.json.gz`` (gzip is detected by its magic bytes)
without decoding the whole document at once: the ``traceEvents`` array is parsed in
batches of complete events (about 1 MiB of text at a time, falling back to one event at a
time where a batch cannot be cut cleanly), and only the fields the analyses need are kept
in compact column arrays with interned strings. Memory stays bounded by the kept columns
plus one batch, not by the size of the file.

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

import gzip
import io
import json
import logging
import math
import os
import re
import zlib
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from labkit.errors import UsageError

logger = logging.getLogger(__name__)

CHUNK_CHARS = 1 << 20  #: text read per refill (characters)
MAX_EVENT_CHARS = 64 << 20  #: a single JSON value larger than this is treated as corrupt
_SLACK = 1 << 16  #: a decode error this far before the end of the buffer is not a truncation

#: categories of device activity that occupy a stream (HTA's kernel categories)
BUSY_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
#: categories whose events live on the device timeline
DEVICE_CATS = BUSY_CATS + ("cuda_sync", "gpu_user_annotation")
#: categories of host calls into the CUDA runtime/driver that carry a correlation id
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")
_NUM = (int, float)
_BOUNDARY = re.compile(r"\}\s*,\s*\{")


@dataclass
class LoadStats:
    """What the loader saw: counts by phase, skipped events and why, timestamp flavour."""

    n_events: int = 0  #: entries in traceEvents
    n_complete: int = 0  #: kept ``X`` events
    n_flows: int = 0
    n_other: int = 0  #: instant, counter and other phases (counted, not kept)
    skipped: int = 0
    skip_reasons: Counter = field(default_factory=Counter)
    first_skipped: list = field(default_factory=list)  #: up to 5 ``(index, reason)``
    ts_float: bool = False  #: some ``ts`` was written as a float (sub-microsecond)
    ts_missing: bool = False  #: some event had no ``ts``
    bytes_read: int = 0  #: uncompressed characters read

    def skip(self, index: int, reason: str) -> None:
        self.skipped += 1
        self.skip_reasons[reason] += 1
        if len(self.first_skipped) < 5:
            self.first_skipped.append((index, reason))


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


class _Interner:
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


def _int_or(v, default: int = -1) -> int:
    t = type(v)
    if t is int:
        return v
    if t is float and math.isfinite(v) and v.is_integer():
        return int(v)
    if t is str:
        try:
            return int(v)
        except ValueError:
            return default
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


_INF = float("inf")
_EVENT_TYPES = ("i", "i", "q", "q", "d", "d", "q", "q", "q", "q", "q", "i", "i", "q")
_FLOW_TYPES = ("q", "b", "d", "q", "q", "i")


class _Columns:
    """Append-only column store: rows are gathered per batch, then moved into typed arrays."""

    def __init__(self) -> None:
        # cat, name, pid, tid, ts, dur, stream, device, corr, ext, bytes, grid, block, index
        self.cols = [array(t) for t in _EVENT_TYPES]
        # id, ph, ts, pid, tid, cat
        self.flow_cols = [array(t) for t in _FLOW_TYPES]
        self.cats = _Interner()
        self.names = _Interner()
        self.dims = _Interner()
        self.dims("")
        self.kind: dict[int, int] = {}  # cat code -> 0 host, 1 runtime, 2 device
        self.threads: list[tuple] = []

    def _kind(self, c: int, cat) -> int:
        k = 2 if cat in DEVICE_CATS else 1 if cat in RUNTIME_CATS else 0
        self.kind[c] = k
        return k

    def add_batch(self, i0: int, batch: list, stats: LoadStats) -> None:  # noqa: C901 - flat is fast
        rows = []
        flows = []
        append = rows.append
        cats, names, kinds, dims = self.cats, self.names, self.kind, self.dims
        ts_float = False
        for i, e in enumerate(batch, i0):
            if type(e) is not dict:
                stats.skip(i, "event is not an object")
                continue
            ph = e.get("ph")
            ts = e.get("ts")
            tt = type(ts)
            if tt is float:
                ts_float = True
            elif ts is None:
                stats.ts_missing = True
            if ph == "X":
                dur = e.get("dur")
                if not ((tt is float or tt is int) and type(dur) in _NUM and 0 <= dur < _INF and ts - ts == 0):
                    stats.skip(i, _bad_x_reason(ts, dur))
                    continue
                cat = e.get("cat")
                if cat == "Trace":
                    stats.n_other += 1
                    continue
                c = cats(cat)
                k = kinds.get(c)
                if k is None:
                    k = self._kind(c, cat)
                pid = e.get("pid")
                tid = e.get("tid")
                if type(pid) is not int:
                    pid = _int_or(pid)
                if type(tid) is not int:
                    tid = _int_or(tid)
                if k == 0:
                    args = e.get("args")
                    ext = args.get("External id", -1) if type(args) is dict else -1
                    if type(ext) is not int:
                        ext = _int_or(ext)
                    append((c, names(e.get("name")), pid, tid, ts, dur, -1, -1, -1, ext, -1, 0, 0, i))
                    continue
                args = e.get("args")
                if type(args) is not dict:
                    args = {}
                corr = _int_or(args.get("correlation"))
                ext = _int_or(args.get("External id"))
                if k == 1:
                    append((c, names(e.get("name")), pid, tid, ts, dur, -1, -1, corr, ext, -1, 0, 0, i))
                    continue
                dev = args.get("device")
                append((c, names(e.get("name")), pid, tid, ts, dur, _int_or(args.get("stream")),
                        _int_or(dev) if dev is not None else pid, corr, ext, _int_or(args.get("bytes")),
                        dims(_dims(args.get("grid"))), dims(_dims(args.get("block"))), i))
            elif ph == "s" or ph == "f" or ph == "t":
                if not ((tt is float or tt is int) and ts - ts == 0):
                    stats.skip(i, "flow event without numeric ts")
                    continue
                flows.append((_int_or(e.get("id")), ord(ph), ts, _int_or(e.get("pid")), _int_or(e.get("tid")),
                              cats(e.get("cat"))))
            elif ph == "M":
                args = e.get("args")
                label = args.get("name", args.get("sort_index", "")) if type(args) is dict else ""
                self.threads.append((_int_or(e.get("pid")), _int_or(e.get("tid")), str(e.get("name")), str(label)))
            else:
                stats.n_other += 1
        if ts_float:
            stats.ts_float = True
        if rows:
            stats.n_complete += len(rows)
            for col, vals in zip(self.cols, zip(*rows)):
                col.extend(vals)
        if flows:
            stats.n_flows += len(flows)
            for col, vals in zip(self.flow_cols, zip(*flows)):
                col.extend(vals)

    def frames(self):
        import pandas as pd

        def col(a, dtype):
            return np.frombuffer(a, dtype=dtype).copy() if len(a) else np.zeros(0, dtype)

        (cat, name, pid, tid, ts, dur, stream, device, corr, ext, nbytes, grid, block, index) = self.cols
        cats = pd.Categorical.from_codes(col(cat, np.int32), categories=self.cats.values)
        names = pd.Categorical.from_codes(col(name, np.int32), categories=self.names.values)
        dims = np.asarray(self.dims.values, dtype=object)

        events = pd.DataFrame({
            "cat": cats,
            "name": names,
            "pid": col(pid, np.int64),
            "tid": col(tid, np.int64),
            "ts_us": col(ts, np.float64),
            "dur_us": col(dur, np.float64),
            "stream": col(stream, np.int64),
            "device": col(device, np.int64),
            "correlation": col(corr, np.int64),
            "external_id": col(ext, np.int64),
            "bytes": col(nbytes, np.int64),
            "grid": dims[col(grid, np.int32)],
            "block": dims[col(block, np.int32)],
            "index": col(index, np.int64),
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


class _Reader:
    """A text buffer over a (possibly gzip'ed) file, refilled in chunks."""

    def __init__(self, fh: io.TextIOBase) -> None:
        self.fh = fh
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.nread = 0
        self.base = 0  #: characters dropped from the front of ``buf``

    def fill(self, want: int = CHUNK_CHARS) -> bool:
        """Read at least ``want`` more characters (fewer at EOF); False when nothing came."""
        if self.eof:
            return False
        if self.pos > 0:
            self.buf = self.buf[self.pos:]
            self.base += self.pos
            self.pos = 0
        try:
            data = self.fh.read(max(want, CHUNK_CHARS))
        except UnicodeDecodeError as exc:
            raise UsageError(f"not a UTF-8 text file ({exc.reason} after ~{self.nread} characters)") from None
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise UsageError(f"corrupt or truncated gzip data ({exc})") from None
        except OSError as exc:
            raise UsageError(f"cannot read trace: {exc}") from None
        if not data:
            self.eof = True
            return False
        self.nread += len(data)
        self.buf += data
        return True

    def peek(self) -> str:
        """The next non-whitespace character ('' at end of input)."""
        while True:
            buf, n = self.buf, len(self.buf)
            p = self.pos
            while p < n and buf[p] in " \t\r\n":
                p += 1
            self.pos = p
            if p < n:
                return buf[p]
            if not self.fill():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.peek()
        if c == "" or c not in chars:
            found = "end of input" if c == "" else repr(c)
            raise UsageError(f"not a trace: expected {what}, found {found}")
        self.pos += 1
        return c

    def value(self, decoder: json.JSONDecoder, what: str):
        """Decode one JSON value at the cursor, reading more text as needed."""
        self.peek()
        while True:
            try:
                obj, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                truncated_here = exc.pos >= len(self.buf) - _SLACK
                if truncated_here and not self.eof and len(self.buf) - self.pos < MAX_EVENT_CHARS:
                    if self.fill(len(self.buf) - self.pos):
                        continue
                if self.eof and (exc.pos >= len(self.buf.rstrip()) - 1 or exc.msg.startswith("Unterminated")):
                    raise UsageError(f"truncated JSON in {what}") from None
                raise UsageError(f"malformed JSON in {what}: {exc.msg}") from None
            except RecursionError:
                raise UsageError(f"malformed JSON in {what}: nesting too deep") from None
            self.pos = end
            return obj


def _open_text(path: Path) -> io.TextIOBase:
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise UsageError(f"cannot open trace {str(path)!r}: {exc.strerror or exc}") from None
    head = raw.read(2)
    raw.seek(0)
    binary = gzip.GzipFile(fileobj=raw, mode="rb") if head == b"\x1f\x8b" else raw
    return io.TextIOWrapper(io.BufferedReader(binary, 1 << 20) if binary is not raw else binary,
                            encoding="utf-8", errors="strict")


def _read_events(rd: _Reader, decoder: json.JSONDecoder, cols: _Columns, stats: LoadStats) -> None:
    """Parse the traceEvents array starting just after its '['."""
    i = 0
    if rd.peek() == "]":
        rd.pos += 1
        return
    loads = json.loads
    bad_until = -1  # absolute offset up to which batches failed: go one event at a time
    while True:
        # Try a batch: cut the buffer at the last event boundary ('}' ',' '{' with optional
        # whitespace) and parse the part before it as one array. A cut that falls inside a
        # string fails to parse; then try earlier boundaries, and after a few failures fall
        # back to single events up to the failed cut.
        if len(rd.buf) - rd.pos < CHUNK_CHARS and not rd.eof:
            rd.fill()
        buf, start = rd.buf, rd.pos
        batch = None
        cut = -1
        if rd.base + start > bad_until:
            probe, attempts = len(buf), 0
            for _ in range(64):
                j = buf.rfind("}", start, probe)
                if j < start + 256:
                    break
                probe = j
                m = _BOUNDARY.match(buf, j)
                if not m:
                    continue
                try:
                    batch = loads("[" + buf[start:j + 1] + "]")
                    cut = j
                    break
                except (ValueError, RecursionError):
                    bad_until = rd.base + j
                    attempts += 1
                    if attempts >= 3:
                        break
        if batch is not None:
            cols.add_batch(i, batch, stats)
            i += len(batch)
            rd.pos = cut + 1
            rd.expect(",", "',' between events")
            continue
        # One event at a time.
        e = rd.value(decoder, f"traceEvents (event {i})")
        cols.add_batch(i, [e], stats)
        i += 1
        c = rd.expect(",]", f"',' or ']' after event {i - 1}")
        if c == "]":
            break
    stats.n_events = i


def load_trace(path: str | os.PathLike) -> Trace:
    """Load a Kineto trace file (``.json`` or gzip'ed) into a ``Trace``.

    Raises ``UsageError`` with a one-line reason when the file is unreadable, truncated,
    not JSON, or has no ``traceEvents`` array. Malformed single events are skipped and
    counted (``Trace.stats``).
    """
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{str(path)!r} is a folder, not a trace file")
    cols = _Columns()
    stats = LoadStats()
    metadata: dict = {}
    decoder = json.JSONDecoder()
    found = False
    with _open_text(path) as fh:
        rd = _Reader(fh)
        first = rd.expect("{[", "a JSON object")
        if first == "[":  # a bare array of events is also a valid Chrome trace
            _read_events(rd, decoder, cols, stats)
            found = True
        else:
            if rd.peek() == "}":
                rd.pos += 1
            else:
                while True:
                    key = rd.value(decoder, "a top-level key")
                    if not isinstance(key, str):
                        raise UsageError("not a trace: top-level keys must be strings")
                    rd.expect(":", "':' after a top-level key")
                    if key == "traceEvents" and rd.peek() == "[":
                        rd.pos += 1
                        _read_events(rd, decoder, cols, stats)
                        found = True
                    else:
                        metadata[key] = rd.value(decoder, f"top-level key {key!r}")
                    if rd.expect(",}", "',' or '}' between top-level keys") == "}":
                        break
        if rd.peek() != "":
            raise UsageError("not a trace: extra data after the JSON document")
        stats.bytes_read = rd.nread
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
