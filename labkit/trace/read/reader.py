"""Streaming reader of Kineto Chrome-trace JSON: a chunked byte buffer, batch decoding, byte ranges.

How and why: docs/trace-analyzer.md ("Reading a trace").
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import gzip
import json
import re
import zlib

from labkit.errors import UsageError
from labkit.trace.read.columns import ColumnStore, LoadStats

from labkit.trace.read import scan

#: which batch decoder the reader uses: "native" (the compiled scanner, straight into the columns; the
#: batches it declines as json's dicts) or "json" (dicts added event by event: the rules that define the tables)
DECODER = "native" if scan.AVAILABLE else "json"

CHUNK_BYTES = 1 << 20  #: bytes read per refill
MAX_EVENT_BYTES = 64 << 20  #: a single JSON value larger than this is treated as corrupt
VALUE_WINDOW = 1 << 16  #: bytes decoded to text first when one value is read on its own
_SLACK = 1 << 16  #: a decode error this far before the end of the buffer is not a truncation

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_SPACE = re.compile(rb"[ \t\r\n]*")


def _not_utf8(exc: UnicodeDecodeError, offset: int) -> UsageError:
    return UsageError(f"not a UTF-8 text file ({exc.reason} after ~{offset + exc.start} bytes)")


class ByteReader:
    """A byte buffer over a (possibly gunzipped) stream, refilled in chunks.

    ``buf[pos:]`` is unread; ``base`` counts bytes dropped from the front; a refill keeps the byte
    before ``pos``; bytes from ``dirty_end`` on are ASCII.
    """

    def __init__(self, fh, progress=None) -> None:
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
        """Decode one JSON value at the cursor, reading more input as needed (truncation told from bad JSON)."""
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


def _try_batch(rd: ByteReader, bad_until: int, scanned):
    """Decode the complete events in the buffer from the cursor as one array: ``(decoded, cut, bad_until)``;
    ``decoded`` is ``("scanned", count)`` when ``scanned(start, end, utf8)`` read them into the columns, else
    ``("dicts", events)``; None when no clean cut was found."""
    buf, start = rd.buf, rd.pos
    if rd.base + start <= bad_until:
        return None, -1, bad_until
    native = DECODER == "native" and scan.AVAILABLE
    probe, attempts = len(buf), 0
    for _ in range(64):
        j = buf.rfind(b"}", start, probe)
        if j < start + 256:
            break
        probe = j
        if not _BOUNDARY.match(buf, j):
            continue
        try:
            if native:
                ascii_only = rd.ascii_from(start)
                if not ascii_only:
                    rd.text(start, j + 1)  # strict UTF-8 first, as the dicts' path reads it (UsageError)
                got = scanned(start, j + 1, not ascii_only)
                if got is not None:
                    return ("scanned", got), j, bad_until
            return ("dicts", json.loads("[" + rd.text(start, j + 1) + "]")), j, bad_until
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
    """Parse the traceEvents array from just after its '[': batches cut at the last event boundary (a cut
    inside a string fails to parse: earlier ones are tried, then one event at a time up to it)."""
    with no_gc():
        _read_events(rd, cols, stats)


def _read_events(rd: ByteReader, cols: ColumnStore, stats: LoadStats) -> None:
    i = 0
    if rd.peek() == "]":
        rd.pos += 1
        return
    decoder = json.JSONDecoder()
    bad_until = -1  # absolute offset up to which batches failed: go one event at a time

    def scanned(start: int, end: int, utf8: bool) -> int | None:
        return scan.add_scanned_batch(cols, rd.buf, start, end, i, stats, utf8=utf8)

    while True:
        if len(rd.buf) - rd.pos < CHUNK_BYTES and not rd.eof:
            rd.fill()
        decoded, cut, bad_until = _try_batch(rd, bad_until, scanned)
        if decoded is not None:
            kind, batch = decoded
            if kind == "scanned":
                i += batch
            else:
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
