"""Streaming reader of Kineto Chrome-trace JSON: a chunked byte buffer, batch decoding, byte ranges on workers.

The ``traceEvents`` array is never decoded whole: about ``CHUNK_BYTES`` of JSON are cut at the last
event boundary and decoded as one array (msgspec structs where installed, else orjson or json; a
batch they decline is decoded again with json), one event at a time where no clean cut exists.
A large file can be read as byte ranges of its event array on worker processes (``read_document(...,
jobs=N)``), merged in file order. How and why: docs/trace-analyzer.md ("Reading a trace").
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import gzip
import json
import multiprocessing as mp
import os
import re
import tempfile
import threading
import zlib
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.read.columns import ColumnStore, LoadStats
from labkit.trace.read.streams import Gunzip, Prefetch, Progress, open_binary, prompt_handover, want_progress
from labkit.trace.read.structs import AVAILABLE as _HAVE_MSGSPEC
from labkit.trace.read.structs import add_struct_batch, decode_batch

try:  # optional: a faster dict decoder for the batch path
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

#: which batch decoder the reader uses: "msgspec" (typed structs straight into columns),
#: "orjson" or "json" (dicts added event by event); set it to "json" to force the stdlib path
DECODER = "msgspec" if _HAVE_MSGSPEC else "orjson" if _orjson is not None else "json"

CHUNK_BYTES = 1 << 20  #: bytes read per refill
MAX_EVENT_BYTES = 64 << 20  #: a single JSON value larger than this is treated as corrupt
VALUE_WINDOW = 1 << 16  #: bytes decoded to text first when one value is read on its own
_SLACK = 1 << 16  #: a decode error this far before the end of the buffer is not a truncation

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_SPACE = re.compile(rb"[ \t\r\n]*")
_OPEN, _CLOSE = ord("["), ord("]")


def _not_utf8(exc: UnicodeDecodeError, offset: int) -> UsageError:
    return UsageError(f"not a UTF-8 text file ({exc.reason} after ~{offset + exc.start} bytes)")


class ByteReader:
    """A byte buffer over a (possibly gunzipped) stream, refilled in chunks.

    ``buf[pos:]`` is unread; ``base`` counts the bytes dropped from the front. A refill keeps the
    byte just before ``pos`` (the batch decoder borrows it for the opening ``[``).
    ``dirty_end``: the end (absolute offset) of the last chunk that held non-ASCII bytes; the
    bytes from there on are ASCII and need no UTF-8 check."""

    def __init__(self, fh, progress: Progress | None = None) -> None:
        self.fh = fh
        self.progress = progress
        self.buf = bytearray()
        self.pos = 0
        self.eof = False
        self.nread = 0
        self.base = 0
        self.dirty_end = 0

    def fill(self, want: int = 0) -> bool:
        """Read at least ``want`` more bytes (fewer at EOF); False when nothing came."""
        if self.eof:
            return False
        if self.pos > 1:
            drop = self.pos - 1
            del self.buf[:drop]
            self.base += drop
            self.pos = 1
        want = max(want, CHUNK_BYTES)
        got = 0
        while got < want:
            try:
                data = self.fh.read(want - got)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise UsageError(f"corrupt or truncated gzip data ({exc})") from None
            except OSError as exc:
                raise UsageError(f"cannot read trace: {exc}") from None
            if not data:
                self.eof = True
                break
            if not data.isascii():
                self.dirty_end = self.base + len(self.buf) + len(data)
            self.buf += data
            self.nread += len(data)
            got += len(data)
        if self.progress is not None:
            self.progress.update()
        return got > 0

    def ascii_from(self, pos: int) -> bool:
        """True when ``buf[pos:]`` is known to be ASCII."""
        return self.base + pos >= self.dirty_end

    def text(self, start: int, end: int) -> str:
        """``buf[start:end]`` as text (strict UTF-8)."""
        try:
            return self.buf[start:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _not_utf8(exc, self.base + start) from None

    def peek(self) -> str:
        """The next non-whitespace character ('' at end of input)."""
        while True:
            buf = self.buf
            p = _SPACE.match(buf, self.pos).end()
            self.pos = p
            if p < len(buf):
                return chr(buf[p])
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
        """Decode one JSON value at the cursor, reading more input as needed.

        The value is decoded from a window of ``VALUE_WINDOW`` bytes first; on any error the
        window grows to the whole buffer, and near its end (a value cut by the buffer) more is
        read, so truncation and malformed JSON are told apart as on the whole input."""
        self.peek()
        window = VALUE_WINDOW
        while True:
            buf, pos = self.buf, self.pos
            end = min(len(buf), pos + window)
            whole = end == len(buf)
            try:
                s, _ = codecs.utf_8_decode(bytes(buf[pos:end]), "strict", self.eof and whole)
            except UnicodeDecodeError as exc:
                raise _not_utf8(exc, self.base + pos) from None
            try:
                obj, cend = decoder.raw_decode(s, 0)
            except json.JSONDecodeError as exc:
                if not whole:
                    window = len(buf) - pos
                    continue
                truncated_here = exc.pos >= len(s) - _SLACK
                if truncated_here and not self.eof and len(buf) - pos < MAX_EVENT_BYTES:
                    if self.fill(len(buf) - pos):
                        window = len(self.buf) - self.pos
                        continue
                if self.eof and (exc.pos >= len(s.rstrip()) - 1 or exc.msg.startswith("Unterminated")):
                    raise UsageError(f"truncated JSON in {what}") from None
                raise UsageError(f"malformed JSON in {what}: {exc.msg}") from None
            except RecursionError:
                raise UsageError(f"malformed JSON in {what}: nesting too deep") from None
            if cend == len(s) and not (self.eof and whole):  # a number may go on past the window
                if not whole:
                    window = len(buf) - pos
                    continue
                if self.fill(len(buf) - pos):
                    window = len(self.buf) - self.pos
                    continue
            self.pos = pos + (cend if s.isascii() else len(s[:cend].encode("utf-8")))
            return obj


def _loads_batch(text: str):
    if DECODER == "orjson":
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass  # e.g. NaN, huge integers, lone surrogates: json decides
    return json.loads(text)


def _decode_batch(text: str):
    """``(kind, events)``: ``("structs", [Event...])`` from msgspec when it takes the text, else
    ``("dicts", [dict...])`` from orjson/json. Raises ValueError when the text is not JSON."""
    if DECODER == "msgspec":
        batch = decode_batch(text)
        if batch is not None:
            return "structs", batch
    return "dicts", _loads_batch(text)


def _batch_text(rd: ByteReader, start: int, j: int) -> str:
    return "[" + rd.text(start, j + 1) + "]"


def _decode_in_place(rd: ByteReader, start: int, j: int):
    """msgspec structs of the events in ``buf[start:j + 1]``, read in place: the byte before
    ``start`` and the one after ``j`` (a separator and a byte of the boundary) are set to ``[``
    and ``]`` for the call and put back after it. None when msgspec declines the batch."""
    buf = rd.buf
    left, right = buf[start - 1], buf[j + 1]
    buf[start - 1], buf[j + 1] = _OPEN, _CLOSE
    try:
        with memoryview(buf) as mv, mv[start - 1:j + 2] as view:
            return decode_batch(view)
    finally:
        buf[start - 1], buf[j + 1] = left, right


def _try_batch(rd: ByteReader, bad_until: int):
    """Decode the complete events in the buffer from the cursor as one array.

    Returns ``(decoded, cut, bad_until)``; ``decoded`` is ``(kind, events, text)`` or None when
    no clean cut was found (a cut falling inside a string fails to parse; after a few failures
    the caller goes one event at a time up to ``bad_until``). ``text`` is the batch as a JSON
    array in a ``str``, or a function that makes it (not needed when msgspec takes the batch)."""
    buf, start = rd.buf, rd.pos
    if rd.base + start <= bad_until:
        return None, -1, bad_until
    clean = rd.ascii_from(start) and DECODER == "msgspec" and start > 0
    probe, attempts = len(buf), 0
    for _ in range(64):
        j = buf.rfind(b"}", start, probe)
        if j < start + 256:
            break
        probe = j
        if not _BOUNDARY.match(buf, j):
            continue
        try:
            if clean:
                batch = _decode_in_place(rd, start, j)
                if batch is not None:
                    return ("structs", batch, lambda: _batch_text(rd, start, j)), j, bad_until
                text = _batch_text(rd, start, j)
                return ("dicts", _loads_batch(text), text), j, bad_until
            text = _batch_text(rd, start, j)
            return (*_decode_batch(text), text), j, bad_until
        except UsageError:  # not UTF-8: no cut helps
            raise
        except (ValueError, RecursionError):
            bad_until = rd.base + j
            attempts += 1
            if attempts >= 3:
                break
    return None, -1, bad_until


@contextlib.contextmanager
def no_gc():
    """The cyclic garbage collector off while events are read: millions of new containers, no cycles among
    them, would start a collection every few hundred of them (restored as it was)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_events(rd: ByteReader, cols: ColumnStore, stats: LoadStats) -> None:
    """Parse the traceEvents array starting just after its '['.

    Batches: the buffer is cut at the last event boundary ('}' ',' '{' with optional
    whitespace) and the part before it is decoded as one array. A cut that falls inside a
    string fails to parse; then earlier boundaries are tried, and after a few failures the
    reader goes one event at a time up to the failed cut. Batches decoded by msgspec go
    straight into the columns (``labkit.trace.read.structs``) unless they hold anything unusual, in
    which case they are decoded again with json and added event by event."""
    with no_gc():
        _read_events(rd, cols, stats)


def _read_events(rd: ByteReader, cols: ColumnStore, stats: LoadStats) -> None:
    i = 0
    if rd.peek() == "]":
        rd.pos += 1
        return
    decoder = json.JSONDecoder()
    bad_until = -1  # absolute offset up to which batches failed: go one event at a time
    while True:
        if len(rd.buf) - rd.pos < CHUNK_BYTES and not rd.eof:
            rd.fill()
        decoded, cut, bad_until = _try_batch(rd, bad_until)
        if decoded is not None:
            kind, batch, text = decoded
            if kind == "structs" and add_struct_batch(cols, batch, i, stats):
                i += len(batch)
            else:
                if kind == "structs":
                    batch = _loads_batch(text() if callable(text) else text)
                add = cols.add_event
                for e in batch:
                    add(i, e, stats)
                    i += 1
                cols.flush(stats)
            rd.pos = cut + 1
            rd.expect(",", "',' between events")
            continue
        e = rd.value(decoder, f"traceEvents (event {i})")
        cols.add_event(i, e, stats)
        cols.flush(stats)
        i += 1
        if rd.expect(",]", f"',' or ']' after event {i - 1}") == "]":
            break
    stats.n_events = i


PART_MIN_BYTES = 16 << 20  #: a byte range read on a worker holds at least this much of the event array
_SPLIT_WINDOW = 1 << 20  #: bytes searched for an event boundary around each cut


def read_document(path: Path, cols: ColumnStore, stats: LoadStats, *, progress: bool | None = None,
                  jobs: int = 1) -> tuple[dict, bool]:
    """Read a whole trace file into ``cols``; returns ``(top-level metadata, traceEvents found)``.

    ``jobs`` > 1: a large file is read as that many byte ranges of its event array, all but the last
    on worker processes (a gzip'ed one is inflated once to a temporary file first); any range that
    does not read cleanly (a cut inside a string, bad input) makes the whole file be read again in
    order, so the result and any error are those of the one-process read. ``progress``: a bar on
    stderr (None: for files over ``PROGRESS_MIN_BYTES`` when stderr is a terminal)."""
    if jobs > 1:
        with contextlib.ExitStack() as stack:
            plain = plain_copy(path, stack, min_bytes=2 * PART_MIN_BYTES)
            metadata: dict = {}
            if plain is not None and _read_parts(plain, cols, stats, metadata, jobs):
                return metadata, stats.found
    metadata = {}
    bar = None
    with open_binary(path) as fh:
        if want_progress(path, progress):
            raw = fh
            while hasattr(raw, "raw") or hasattr(raw, "fileobj"):  # down to the file on disk
                raw = getattr(raw, "fileobj", None) or raw.raw
            bar = Progress(raw, os.path.getsize(path), path.name)
        try:
            with prompt_handover() if isinstance(fh, Prefetch) else contextlib.nullcontext():
                _read_body(ByteReader(fh, bar), cols, stats, metadata)
        finally:
            if bar is not None:
                bar.close()
    return metadata, stats.found


def _read_body(rd: ByteReader, cols, stats, metadata, split=None) -> None:
    """Parse the document: metadata keys into ``metadata``, events into ``cols``. ``split(rd)``, when
    given, is called just inside the event array and may read it itself (returning a reader past it)."""
    found = False
    decoder = json.JSONDecoder()
    first = rd.expect("{[", "a JSON object")
    if first == "[":  # a bare array of events is also a valid Chrome trace
        read_events(rd, cols, stats)
        found = True
    elif rd.peek() == "}":
        rd.pos += 1
    else:
        while True:
            key = rd.value(decoder, "a top-level key")
            if not isinstance(key, str):
                raise UsageError("not a trace: top-level keys must be strings")
            rd.expect(":", "':' after a top-level key")
            if key == "traceEvents" and rd.peek() == "[" and not found:
                rd.pos += 1
                rd = (split(rd) if split is not None else None) or rd
                read_events(rd, cols, stats)
                found = True
            else:
                metadata[key] = rd.value(decoder, f"top-level key {key!r}")
            if rd.expect(",}", "',' or '}' between top-level keys") == "}":
                break
    if rd.peek() != "":
        raise UsageError("not a trace: extra data after the JSON document")
    stats.bytes_read = rd.nread
    stats.found = found


class RangeStream:
    """``[`` + bytes ``start .. end`` of a file + ``]``: one byte range of an event array as an array."""

    def __init__(self, path, start: int, end: int) -> None:
        self.fh = open(path, "rb")
        self.fh.seek(start)
        self.left, self.head, self.tail = end - start, b"[", b"]"

    def read(self, n: int) -> bytes:
        out, self.head = self.head, b""
        take = min(n, self.left)
        data = self.fh.read(take) if take > 0 else b""
        self.left -= len(data)
        if not self.left or not data:
            data, self.tail = data + self.tail, b""
        return out + data

    def close(self) -> None:
        self.fh.close()


def read_range(path: str, start: int, end: int) -> tuple[tuple, LoadStats]:
    """Read bytes ``start .. end`` of a file (whole events of its array, separated by commas) on a worker:
    ``(ColumnStore.part(), LoadStats)``, event indices counted from the range's first event."""
    cols, stats = ColumnStore(), LoadStats()
    rs = RangeStream(path, start, end)
    try:
        _read_body(ByteReader(rs), cols, stats, {})
    finally:
        rs.close()
    return cols.part(), stats


def _cuts(path: Path, begin: int, size: int, parts: int) -> list[tuple[int, int]]:
    """``(end, next start)`` of ``parts - 1`` cuts of bytes ``begin .. size`` at event boundaries
    (``}`` .. ``,`` .. ``{``), preferring one whose blank holds a line break (never inside a string)."""
    out = []
    with open(path, "rb") as f:
        for k in range(1, parts):
            at = begin + (size - begin) * k // parts
            f.seek(at)
            window = f.read(_SPLIT_WINDOW)
            found = [m for m in _BOUNDARY.finditer(window)]
            if not found:
                continue
            m = next((m for m in found if b"\n" in m.group()), found[0])
            cut = (at + m.start() + 1, at + m.end() - 1)
            if not out or cut[0] > out[-1][1]:
                out.append(cut)
    return out


def _read_parts(path: Path, cols: ColumnStore, stats: LoadStats, metadata: dict, jobs: int) -> bool:
    """Read ``path`` (plain JSON) as byte ranges of its event array (see ``read_document``); False when
    the file is too small to split or any range did not read cleanly (the caller reads it in order)."""
    size = path.stat().st_size
    parts = min(jobs, size // PART_MIN_BYTES)
    if parts < 2:
        return False
    futures, own = [], LoadStats()

    def split(rd: ByteReader):
        begin = rd.base + rd.pos
        cuts = _cuts(path, begin, size, parts)
        if not cuts:
            return None
        starts = [begin] + [s for _, s in cuts]
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() and threading.active_count() == 1
                             else "spawn")  # fork: no re-import (no other thread to copy in an odd state)
        pool = ProcessPoolExecutor(max_workers=len(cuts), mp_context=ctx)
        pool_box.append(pool)
        futures.extend(pool.submit(read_range, str(path), a, z) for a, (z, _) in zip(starts, cuts))
        fh = open(path, "rb")
        files.append(fh)
        fh.seek(starts[-1] - 1)  # the byte before the last range: the batch decoder borrows it
        nxt = ByteReader(fh)
        nxt.base = starts[-1] - 1
        nxt.fill()
        nxt.pos = 1
        return nxt

    pool_box: list = []
    files: list = []
    tail = ColumnStore()
    try:
        with open(path, "rb") as fh:
            _read_body(ByteReader(fh), tail, own, metadata, split)
        results = [f.result() for f in futures]
    except (UsageError, BrokenProcessPool, OSError):
        return False
    finally:
        for p in pool_box:
            p.shutdown(cancel_futures=True)
        for f in files:
            f.close()
    if not futures:
        return False
    offset = 0
    for part, st in results + [(tail.part(), own)]:
        cols.extend(part, offset)
        stats.add(st, offset)
        offset += st.n_events
    stats.n_events, stats.bytes_read, stats.found, stats.parts = offset, size, own.found, len(results) + 1
    return True


def plain_copy(path: Path, stack: contextlib.ExitStack, *, min_bytes: int) -> Path | None:
    """``path`` itself when it is plain JSON of at least ``min_bytes``; a gzip'ed one of at least that
    (by its trailer) inflated once into a temporary file removed with ``stack``; else None."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
            size = os.fstat(f.fileno()).st_size
            if gz and size >= 4:
                f.seek(-4, os.SEEK_END)
                size = max(int.from_bytes(f.read(4), "little"), size)  # ISIZE: the inflated size mod 2**32
    except OSError:
        return None
    if size < min_bytes:
        return None
    if not gz:
        return path
    tmp = stack.enter_context(tempfile.NamedTemporaryFile(prefix="labkit-trace-", suffix=".json"))
    try:
        with open(path, "rb") as raw:
            src = Gunzip(raw)
            while chunk := src.read():
                tmp.write(chunk)
        tmp.flush()
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
        return None  # the reader in order says what is wrong
    return Path(tmp.name)
