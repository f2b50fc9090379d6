"""Reading a whole trace file: in order, or as byte ranges of its event array on worker processes."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.read.columns import EVENT_DTYPES, ColumnStore, LoadStats, mapped
from labkit.trace.read import reader
from labkit.trace.read.reader import _BOUNDARY, ByteReader
from labkit.trace.read.streams import Prefetch, Progress, open_binary, prompt_handover, want_progress

PART_MIN_BYTES = 8 << 20  #: a byte range read on a worker holds at least this much of the event array
_SPLIT_WINDOW = 1 << 20  #: bytes searched for an event boundary around each cut
#: fewer bytes than any kept event takes in the JSON: room reserved per byte of it (never-written room costs no memory)
MIN_EVENT_BYTES = 64
#: a byte range's first byte -> the columns a worker forked to read it writes its rows into (set before the fork)
_SHARED_OUT: dict[int, list] = {}


def read_document(path: Path, cols: ColumnStore, stats: LoadStats, *, progress: bool | None = None,
                  jobs: int = 1) -> tuple[dict, bool]:
    """Read a whole trace file into ``cols``; returns ``(top-level metadata, traceEvents found)``.

    ``jobs`` > 1: a large plain JSON file is read as that many byte ranges of its event array, all but
    the last on worker processes; any range that does not read cleanly (a cut inside a string, bad input)
    makes the whole file be read again in order, so the result and any error are those of the
    one-process read. A gzip'ed file is read in order at any ``jobs``: its bytes are inflated on a
    thread while they are read, which a split, inflating all of them before any range starts, cannot
    beat. ``progress``: a bar on stderr (None: for files over ``PROGRESS_MIN_BYTES`` when stderr is a
    terminal)."""
    gz, size = False, 0
    with contextlib.suppress(OSError):  # the read below says what is wrong with the file
        gz, size = json_size(path)
    if jobs > 1 and not gz and size >= 2 * PART_MIN_BYTES:
        metadata: dict = {}
        if _read_parts(path, cols, stats, metadata, jobs):
            return metadata, stats.found
    metadata = {}
    bar = None
    cols.reserve(size // MIN_EVENT_BYTES)
    with open_binary(path) as fh:
        if want_progress(path, progress):
            raw = fh
            while hasattr(raw, "raw") or hasattr(raw, "fileobj"):  # down to the file on disk
                raw = getattr(raw, "fileobj", None) or raw.raw
            bar = Progress(raw, os.path.getsize(path), path.name)
        try:
            with prompt_handover() if isinstance(fh, Prefetch) else contextlib.nullcontext():
                reader._read_body(ByteReader(fh, bar), cols, stats, metadata)
        finally:
            if bar is not None:
                bar.close()
    return metadata, stats.found


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
    ``(ColumnStore.part(), LoadStats)``, event indices counted from the range's first event. A worker forked
    with columns shared for its range (``_SHARED_OUT``) writes its rows there and sends back their count in
    place of the columns (the parent reads them where they are); any other sends the columns."""
    cols, stats = ColumnStore(), LoadStats()
    shared = _SHARED_OUT.get(start)
    if shared is not None:
        cols.arrays = shared
    cols.reserve((end - start) // MIN_EVENT_BYTES)
    rs = RangeStream(path, start, end)
    try:
        reader._read_body(ByteReader(rs), cols, stats, {})
    finally:
        rs.close()
    part = cols.part()
    if shared is not None and cols.arrays[0] is shared[0]:  # not outgrown
        part = (cols.n, *part[1:])
    return part, stats



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
        firsts.extend(starts[:-1])
        fork = "fork" in mp.get_all_start_methods() and threading.active_count() == 1
        ctx = mp.get_context("fork" if fork else "spawn")  # fork: no re-import (no other thread to copy half-way)
        if fork:  # the workers write their rows where the parent reads them (spawned ones send them pickled)
            _SHARED_OUT.update({a: [mapped((z - a) // MIN_EVENT_BYTES, dt, shared=True) for dt in EVENT_DTYPES]
                                for a, (z, _) in zip(starts, cuts)})
        pool = ProcessPoolExecutor(max_workers=len(cuts), mp_context=ctx)
        pool_box.append(pool)
        futures.extend(pool.submit(read_range, str(path), a, z) for a, (z, _) in zip(starts, cuts))
        fh = open(path, "rb")
        files.append(fh)
        room = sum(z - a for a, (z, _) in zip(starts, cuts)) // MIN_EVENT_BYTES  # the workers' events at most
        tail.reserve(room + (size - starts[-1]) // MIN_EVENT_BYTES)
        tail.lo = tail.n = room  # the last range's rows after room for the others': they go in front of them
        fh.seek(starts[-1] - 1)  # the byte before the last range: the batch decoder borrows it
        nxt = ByteReader(fh)
        nxt.base = starts[-1] - 1
        nxt.fill()
        nxt.pos = 1
        return nxt

    pool_box: list = []
    files: list = []
    firsts: list = []  # each worker's range's first byte
    tail = ColumnStore()
    try:
        with open(path, "rb") as fh:
            reader._read_body(ByteReader(fh), tail, own, metadata, split)
        results = [f.result() for f in futures]
        # a part whose rows stayed in the shared columns comes back as their count
        results = [(([c[:part[0]] for c in _SHARED_OUT[a]] if isinstance(part[0], int) else part[0], *part[1:]), st)
                   for a, (part, st) in zip(firsts, results)]
    except (UsageError, BrokenProcessPool, OSError):
        return False
    finally:
        for p in pool_box:
            p.shutdown(cancel_futures=True)
        for f in files:
            f.close()
        _SHARED_OUT.clear()  # the parts hold what they need of the mappings
    if not futures:
        return False
    offset, before = 0, sum(len(part[0][0]) for part, _ in results)
    shared = before <= tail.lo  # the other ranges' rows fit in front of the last one's: it is not copied
    if shared:
        cols.arrays, cols.lo = tail.arrays, tail.lo - before
        cols.n = cols.lo
    else:
        cols.reserve(before + tail.n - tail.lo)
    for k, (part, st) in enumerate(results + [(tail.part(), own)]):
        cols.extend(part, offset, in_place=shared and k == len(results))
        stats.add(st, offset)
        offset += st.n_events
    stats.n_events, stats.bytes_read, stats.found, stats.parts = offset, size, own.found, len(results) + 1
    return True


def json_size(path: Path) -> tuple[bool, int]:
    """``(gzip'ed, bytes of JSON)`` of a trace file: its size, or for a gzip'ed one its trailer's (ISIZE, the
    inflated size mod 2**32) when larger. Raises OSError when it cannot be read."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
        size = os.fstat(f.fileno()).st_size
        if gz and size >= 4:
            f.seek(-4, os.SEEK_END)
            size = max(int.from_bytes(f.read(4), "little"), size)
    return gz, size
