"""Progress bars for long runs: tqdm on stderr when it is a terminal, silence otherwise."""

from __future__ import annotations

import sys
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def progress(iterable: Iterable[T], *, total: int | None = None, desc: str = "", force: bool = False) -> Iterator[T]:
    """Wrap ``iterable`` in a tqdm bar on stderr if stderr is a TTY (or ``force``)."""
    if force or sys.stderr.isatty():
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return iter(iterable)
        return iter(tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False))
    return iter(iterable)
