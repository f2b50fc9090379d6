"""The results store: one JSON file per benchmark at ``data/results/<machine>/<name>.json``.

A result carries a schema version, the machine description, labkit's git commit, the
time, the parameters, a ``source`` (``measured-gpu``, ``measured-cpu``, ``simulated``,
``interpreted``) and ``rows``: flat records that load straight into a DataFrame.
Writes are atomic (temp file + ``os.replace``); corrupt or foreign files are skipped
with a warning naming them.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import os
import re
import subprocess
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from labkit.device import SOURCES, describe_machine
from labkit.fileio import write_atomic

logger = logging.getLogger(__name__)

SCHEMA = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
REPO_ROOT = Path(__file__).resolve().parent.parent


def data_root() -> Path:
    """``$LABKIT_DATA`` or the repository's ``data/`` folder."""
    env = os.environ.get("LABKIT_DATA")
    return Path(env) if env else REPO_ROOT / "data"


def results_root() -> Path:
    """``$LABKIT_RESULTS`` or ``<data_root>/results``."""
    env = os.environ.get("LABKIT_RESULTS")
    return Path(env) if env else data_root() / "results"


@functools.lru_cache(maxsize=1)
def labkit_commit() -> str:
    """Short git commit of the labkit checkout (``+dirty`` if modified), or ``unknown``."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10, check=False,
        )
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no", "--", "labkit"],
            capture_output=True, text=True, timeout=10, check=False,
        )
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@dataclass
class BenchResult:
    """One benchmark's result; ``rows`` are flat dicts (variant, swept params, quantiles)."""

    name: str
    source: str
    params: dict
    rows: list[dict]
    machine: dict = field(default_factory=dict)
    labkit_commit: str = "unknown"
    created: str = ""
    schema: int = SCHEMA
    path: str | None = field(default=None, compare=False)

    @property
    def slug(self) -> str:
        return self.machine.get("slug", "unknown")

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("path", None)
        return d


def make_result(
    name: str,
    rows: Iterable[dict],
    *,
    params: dict | None = None,
    source: str,
    machine: dict | None = None,
) -> BenchResult:
    """Build a result stamped with this machine, commit and time."""
    if not _NAME.match(name):
        raise ValueError(f"bad result name {name!r}: letters, digits, '.', '_' and '-' only")
    if source not in SOURCES:
        raise ValueError(f"bad source {source!r}: one of {', '.join(SOURCES)}")
    return BenchResult(
        name=name,
        source=source,
        params=dict(params or {}),
        rows=[dict(r) for r in rows],
        machine=dict(machine if machine is not None else describe_machine()),
        labkit_commit=labkit_commit(),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )


def sized_name(name: str, size: str) -> str:
    """Result name for a run of ``size``: ``name`` when full, ``name_quick`` otherwise.

    Quick runs (the notebooks' default) never overwrite a full recording; ``*_quick.json``
    files are not committed.
    """
    return name if size == "full" else f"{name}_quick"


def save_result(result: BenchResult, root: Path | str | None = None) -> Path:
    """Write ``result`` atomically to ``<root>/<slug>/<name>.json`` and return the path."""
    root = Path(root) if root is not None else results_root()
    path = root / result.slug / f"{result.name}.json"
    write_atomic(path, json.dumps(result.to_json(), indent=1, sort_keys=False, default=_jsonable) + "\n")
    result.path = str(path)
    logger.info("saved %s", path)
    return path


def report_saved(results: dict[str, BenchResult], json_path: str | None = None) -> None:
    """CLI helper: print where each saved result went; write them all as one JSON object if asked."""
    for res in results.values():
        if res.path:
            print(f"saved {res.path}")
    if json_path:
        payload = {name: res.to_json() for name, res in results.items()}
        write_atomic(json_path, json.dumps(payload, indent=1, default=_jsonable) + "\n")


def _jsonable(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


_REQUIRED = {"schema": int, "name": str, "source": str, "params": dict, "rows": list, "machine": dict}


def parse_result(data: object, path: str | None = None) -> BenchResult:
    """Validate a decoded JSON object as a result; ``ValueError`` says what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for key, typ in _REQUIRED.items():
        if not isinstance(data.get(key), typ):
            raise ValueError(f"missing or mistyped field {key!r}")
    if data["schema"] > SCHEMA:
        raise ValueError(f"schema {data['schema']} is newer than this labkit ({SCHEMA})")
    if data["source"] not in SOURCES:
        raise ValueError(f"unknown source {data['source']!r}")
    if not all(isinstance(r, dict) for r in data["rows"]):
        raise ValueError("rows must be objects")
    return BenchResult(
        name=data["name"], source=data["source"], params=data["params"], rows=data["rows"],
        machine=data["machine"], labkit_commit=str(data.get("labkit_commit", "unknown")),
        created=str(data.get("created", "")), schema=data["schema"], path=path,
    )


def load_results(
    root: Path | str | None = None, *, name: str | None = None, machine: str | None = None
) -> list[BenchResult]:
    """Every readable result under ``root`` (filtered by name / machine slug folder).

    Files that are not valid results are skipped with a warning naming the file.
    """
    root = Path(root) if root is not None else results_root()
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.glob("*/*.json")):
        if machine is not None and path.parent.name != machine:
            continue
        if name is not None and path.stem != name:
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            out.append(parse_result(data, str(path)))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
            msg = f"skipping {path}: {exc}"
            warnings.warn(msg, stacklevel=2)
            logger.warning(msg)
    return out


def load_result(name: str, machine: str | None = None, root: Path | str | None = None) -> BenchResult | None:
    """The result ``name`` for ``machine`` (default: this machine's slug), or None."""
    slug = machine or describe_machine()["slug"]
    found = load_results(root, name=name, machine=slug)
    return found[0] if found else None


def results_rows(results: Iterable[BenchResult]) -> list[dict]:
    """Flat rows over many results, each tagged with machine slug, GPU, source and name."""
    rows = []
    for r in results:
        for row in r.rows:
            rows.append({
                "machine": r.slug,
                "gpu_name": r.machine.get("gpu_name"),
                "source": r.source,
                "result": r.name,
                "created": r.created,
                **row,
            })
    return rows


def results_table(results: Iterable[BenchResult]):
    """``results_rows`` as a pandas DataFrame (pandas is needed only here)."""
    import pandas as pd

    return pd.DataFrame(results_rows(results))
