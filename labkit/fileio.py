"""Atomic file writes: a reader (or a crash) never sees a half-written file.

Every file the lab writes (results, traces, reports, JSON outputs) goes through this module:
``write_atomic`` for bytes or text, ``write_json`` for JSON documents (numpy and torch
scalars become numbers), and ``atomic_target`` for writers that insist on a path of their own
(the profiler's ``export_chrome_trace``). The data goes to a temporary file in the same folder,
is flushed to disk, gets the usual permissions and then replaces the target in one
``os.replace``; on any error (or an interrupt) the temporary file is removed and the old target
is left as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Iterator


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _unlink_quietly(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_mode())  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return path


def jsonable(obj):
    """``json.dumps`` fallback: numpy/torch scalars as numbers, sets and tuples as lists, paths as text."""
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def dumps_json(obj, *, indent: int | None = 1, allow_nan: bool = True) -> str:
    """``obj`` as JSON text with a final newline (the lab's one JSON encoding)."""
    return json.dumps(obj, indent=indent, default=jsonable, allow_nan=allow_nan) + "\n"


def write_json(path: str | os.PathLike, obj, *, indent: int | None = 1, allow_nan: bool = True) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically. The text is built first, so an object
    that cannot be encoded raises before anything touches the disk."""
    return write_atomic(path, dumps_json(obj, indent=indent, allow_nan=allow_nan))


@contextlib.contextmanager
def atomic_target(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path next to ``path`` (same name ending, e.g. ``.json.gz``) for a writer that
    needs a path; it replaces ``path`` when the block ends without error, and is removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{uuid.uuid4().hex[:12]}.{path.name}"
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"nothing was written to {tmp}")
        os.chmod(tmp, _default_mode())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def copy_atomic(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Copy the file ``src`` to ``dst`` atomically (a reader never sees a partial copy); returns ``dst``."""
    import shutil

    with atomic_target(dst) as part:
        shutil.copyfile(src, part)
    return Path(dst)
