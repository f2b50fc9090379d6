"""User-named output files of the trace commands (``labkit analyze``, ``labkit whatif``).

Every path is checked before any work (not a folder, in an existing folder, two outputs not on
one file, no output on an input), and the outputs are written all or none, so bad input leaves
nothing behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from labkit import fileio
from labkit.errors import UsageError


def check_output(path: str | os.PathLike) -> Path:
    """A user-named output path that can be written: not a folder, in an existing folder."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"output {str(path)!r} is a folder")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"output folder {str(parent)!r} does not exist")
    return path


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write a user-named output atomically; a missing folder or a folder as target is a ``UsageError``."""
    return fileio.write_atomic(check_output(path), text, make_parents=False)


def check_outputs(outputs: dict[str, str | None], inputs: list[Path]) -> dict[str, Path]:
    """Check every named output before any work: writable, pairwise distinct, not an input.

    ``outputs``: option name -> path (None when not given). Returns the given ones as Paths."""
    given = {k: check_output(v) for k, v in outputs.items() if v}
    seen: dict = {}
    for opt, p in given.items():
        key = p.resolve()
        if key in seen:
            raise UsageError(f"{seen[key]} and {opt} name the same file {str(p)!r}")
        seen[key] = opt
    ins = {p.resolve() for p in inputs}
    for opt, p in given.items():
        if p.resolve() in ins:
            raise UsageError(f"{opt} {str(p)!r} is one of the input traces")
    return given


def write_all(outputs: dict[Path, str]) -> None:
    """Write every output or none: all go to temporary files first, then each replaces its target."""
    temps: list[tuple[str, Path]] = []
    done: list[Path] = []
    try:
        for path, text in outputs.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
            temps.append((tmp, path))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, fileio._default_mode())
        for tmp, path in temps:
            os.replace(tmp, path)
            done.append(path)
    except OSError as exc:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        for path in done:
            path.unlink(missing_ok=True)
        raise UsageError(f"cannot write outputs: {exc.strerror or exc}") from None
