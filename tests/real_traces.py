"""Where the tests find real GPU traces.

Every test that needs a real trace runs on the trimmed, gzipped fixtures of ``tests/data``
(provenance, commit and license in ``tests/data/README.md``; ``tests/make_trace_fixtures.py``
makes the trimmed ones), so a clone on its own runs them all. The larger traces they were
trimmed from (the shared collection, a folder ``shared/traces`` beside the repository, or
``LABKIT_SHARED_TRACES``) add extra cases where they are present, as in CI; nothing skips
for their absence.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
SHARED = Path(os.environ.get("LABKIT_SHARED_TRACES") or REPO.parent / "shared" / "traces")


def fixtures() -> list[Path]:
    """The real-trace fixtures of ``tests/data``."""
    return sorted(DATA.glob("*.pt.trace.json.gz"))


def shared() -> list[Path]:
    """The traces of the shared collection ([] where it is not present)."""
    return sorted(SHARED.glob("*.pt.trace.json.gz")) if SHARED.is_dir() else []


def shared_trace(name: str) -> list[Path]:
    """``[path]`` of one trace of the shared collection, or [] where it is not present: for
    ``pytest.mark.parametrize`` lists, so an absent trace adds no case instead of a skip."""
    p = SHARED / name
    return [p] if p.is_file() else []


def find(name: str) -> Path | None:
    """A trace by file name: the fixture of that name, else the shared collection's."""
    for p in (DATA / name, SHARED / name):
        if p.is_file():
            return p
    return None
