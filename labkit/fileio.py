"""Atomic file writes: a reader (or a crash) never sees a half-written file.

Every file the lab writes (results, traces, reports, JSON outputs) goes through
``write_atomic``: the data goes to a temporary file in the same folder, is flushed to
disk, gets the usual permissions and then replaces the target in one ``os.replace``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | os.PathLike, data: str | bytes, *, make_parents: bool = True) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically; returns the path."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if make_parents:
        parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_mode())  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
