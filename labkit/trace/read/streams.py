"""Byte streams under the trace reader: a file or its gunzipped bytes (inflated ahead on a thread), a progress bar."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import queue
import sys
import threading
import time
import zlib
from pathlib import Path

from labkit.errors import UsageError

try:  # optional: a faster inflate (same bytes); ISA-L first, then zlib-ng, else the standard library
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - depends on the environment
    try:
        from zlib_ng import zlib_ng as _inflate
    except ImportError:
        _inflate = zlib
INFLATE = _inflate.__name__.split(".")[-1]  #: which library inflates gzip'ed traces

PROGRESS_MIN_BYTES = 50_000_000  #: files larger than this get a progress bar (on a terminal)


class Progress:
    """A one-line progress bar on stderr over the bytes of a file read so far (no dependency)."""

    def __init__(self, raw, total: int, label: str) -> None:
        self.raw, self.total, self.label = raw, max(total, 1), label
        self.last = 0.0

    def update(self) -> None:
        now = time.monotonic()
        if now - self.last < 0.2:
            return
        self.last = now
        try:
            done = self.raw.tell()
        except (OSError, ValueError):
            return
        frac = min(done / self.total, 1.0)
        bar = "#" * int(30 * frac)
        sys.stderr.write(f"\r{self.label}: [{bar:<30}] {100 * frac:5.1f}% of {self.total / 1e6:.0f} MB")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\r" + " " * (len(self.label) + 60) + "\r")
        sys.stderr.flush()


class Prefetch(io.RawIOBase):
    """A binary stream read a few chunks ahead on a background thread (source errors raised by ``read``)."""

    def __init__(self, src, chunk: int = 1 << 20, depth: int = 4) -> None:
        super().__init__()
        self.fileobj = src  #: the source stream (the progress bar walks down to the file)
        self._chunk = chunk
        self._q: queue.Queue = queue.Queue(depth)
        self._buf = b""
        self._pos = 0
        self._eof = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="labkit-trace-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                data = self.fileobj.read(self._chunk)
                self._q.put(data)
                if not data:
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            self._q.put(exc)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all of the next chunk for -1); b"" at the end."""
        if self._pos >= len(self._buf):
            if self._eof:
                return b""
            item = self._q.get()
            if isinstance(item, BaseException):
                self._eof = True
                raise item
            if not item:
                self._eof = True
                return b""
            self._buf, self._pos = item, 0
        left = len(self._buf) - self._pos
        if self._pos == 0 and (size < 0 or size >= left):
            self._pos = left
            return self._buf
        n = left if size < 0 else min(size, left)
        out = self._buf[self._pos:self._pos + n]
        self._pos += n
        return out

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._stop.set()
            while self._thread.is_alive():  # unblock a pending put, then let the thread finish
                try:
                    self._q.get(timeout=0.05)
                except queue.Empty:
                    pass
            self.fileobj.close()
        super().close()


class Gunzip:
    """The decompressed bytes of a (multi-member) gzip stream, inflated by ``zlib`` in large steps.

    ``gzip.GzipFile`` inflates 8 KiB of input per call, and each call gives the GIL back and
    takes it again; on a background thread that competes with a busy parsing thread, those
    hand-overs, not the inflating, set the pace. Here one call inflates up to ``in_chunk`` bytes of
    input (at most ``out_max`` bytes of output). Errors are those of ``gzip``: ``zlib.error`` for
    corrupt data, ``EOFError`` for a stream cut short, ``gzip.BadGzipFile`` for trailing bytes that
    do not start another member."""

    _MAGIC = b"\x1f\x8b"

    def __init__(self, fileobj, in_chunk: int = 1 << 20, out_max: int = 4 << 20) -> None:
        self.fileobj = fileobj  #: the compressed source (the progress bar walks down to it)
        self._in_chunk, self._out_max = in_chunk, out_max
        self._d = None  # the member being inflated (None between members)
        self._pending = b""  # input not yet given to a decompressor

    def read(self, size: int = -1) -> bytes:
        while True:
            if not self._pending:
                self._pending = self.fileobj.read(self._in_chunk)
            if not self._pending:  # end of the compressed input
                if self._d is None:
                    return b""
                try:
                    out = self._d.decompress(b"", self._out_max)  # output zlib may still hold
                except _inflate.error as exc:
                    raise zlib.error(str(exc)) from None
                if self._d.eof:
                    self._d = None
                if out:
                    return out
                if self._d is not None:
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
                continue
            if self._d is None:  # between members: zero padding, then another member or the end
                self._pending = self._pending.lstrip(b"\x00")
                if not self._pending:
                    continue
                if len(self._pending) < 2:
                    more = self.fileobj.read(self._in_chunk)
                    if more:
                        self._pending += more
                        continue
                if self._pending[:2] != self._MAGIC:
                    raise gzip.BadGzipFile(f"Not a gzipped file ({self._pending[:2]!r})")
                self._d = _inflate.decompressobj(31)
            d = self._d
            try:
                out = d.decompress(self._pending, self._out_max)
            except _inflate.error as exc:  # the same error whichever library inflates
                raise zlib.error(str(exc)) from None
            if d.eof:  # what follows this member (its unconsumed tail is the same bytes)
                self._pending = d.unused_data
                self._d = None
            else:
                self._pending = d.unconsumed_tail
            if out:
                return out

    def close(self) -> None:
        self.fileobj.close()


def open_binary(path: Path):
    """A binary stream over ``path``: the file itself, or its gunzipped bytes (inflated on a prefetch
    thread) when it starts with the gzip magic bytes."""
    try:
        raw = open(path, "rb", buffering=0)
    except OSError as exc:
        raise UsageError(f"cannot open trace {str(path)!r}: {exc.strerror or exc}") from None
    try:
        head = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise UsageError(f"cannot read trace: {exc}") from None
    if head != b"\x1f\x8b":
        return raw
    return Prefetch(Gunzip(raw))


def want_progress(path: Path, progress: bool | None) -> bool:
    if progress is not None:
        return progress
    try:
        return os.path.getsize(path) > PROGRESS_MIN_BYTES and sys.stderr.isatty()
    except (OSError, ValueError):
        return False


#: the interpreter's thread switch interval (s) while a gzip'ed trace is read (see ``prompt_handover``)
PREFETCH_SWITCH_S = 0.001
_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.005


@contextlib.contextmanager
def prompt_handover():
    """Hand the GIL over every ``PREFETCH_SWITCH_S`` instead of 5 ms while a gzip'ed trace is read (nestable)."""
    global _switch_users, _switch_saved
    with _switch_lock:
        if _switch_users == 0:
            _switch_saved = sys.getswitchinterval()
            if _switch_saved > PREFETCH_SWITCH_S:
                sys.setswitchinterval(PREFETCH_SWITCH_S)
        _switch_users += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch_users -= 1
            if _switch_users == 0:
                sys.setswitchinterval(_switch_saved)
