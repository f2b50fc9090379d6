"""Which recorded results a notebook read (an audit hook in each kernel), and which labkit commits they come from."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from labkit.results import commit_status, parse_result
from labkit.timing import unit_costs

READS_ENV = "LABKIT_REPORT_READS"
#: run in the kernel at start-up (IPython ``exec_lines``): no name is left in the user namespace
KERNEL_SETUP = "__import__('labkit.report.provenance', fromlist=['x']).track_result_reads()"


def track_result_reads(log_path: str | None = None, root: Path | str | None = None) -> bool:
    """Record every ``.json`` opened under ``root`` (default: the results store) in ``log_path``
    (default: ``$LABKIT_REPORT_READS``), one path per line; False when there is no log path."""
    from labkit.results import results_root

    log_path = log_path or os.environ.get(READS_ENV)
    if not log_path:
        return False
    prefix = str(Path(root if root is not None else results_root()).resolve()) + os.sep
    busy = [False]

    def hook(event: str, args: tuple) -> None:
        if event != "open" or busy[0] or not args:
            return
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        elif not isinstance(path, str):
            path = getattr(path, "__fspath__", lambda: None)()
            if not isinstance(path, str):
                return  # a file descriptor
        if not path.endswith(".json"):
            return
        full = os.path.abspath(path)
        if not full.startswith(prefix):
            return
        busy[0] = True  # our own write below opens a file too
        try:
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(full + "\n")
        except OSError:
            pass
        finally:
            busy[0] = False

    sys.addaudithook(hook)
    return True


def results_read(log_path: Path | str) -> tuple[list[dict], list[str]]:
    """The results listed in ``log_path``, each once, in reading order, with their commit and status; and those
    that did not load (``machine/file``).
    """
    try:
        lines = Path(log_path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return [], []
    out: list[dict] = []
    unreadable: list[str] = []
    seen: set[str] = set()
    for line in lines:
        if not line or line in seen:
            continue
        seen.add(line)
        path = Path(line)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError:
            continue
        except ValueError:
            unreadable.append(f"{path.parent.name}/{path.name}")
            continue
        try:
            result = parse_result(data, str(path))
        except (ValueError, TypeError, KeyError):
            continue
        commit = (result.labkit_commit or "").strip() or "unknown"
        out.append({
            "machine": path.parent.name,
            "name": result.name,
            "labkit_commit": commit,
            "commit_status": commit_status(commit),
            "size": result.size,
            # a CPU timing whose run kept no unit costs: how fast that CPU ran then is unknown
            **({"unit_costs": False} if result.source == "measured-cpu" and not unit_costs(result) else {}),
        })
    return out, unreadable


def by_commit(results: list[dict]) -> dict[str, list[str]]:
    """The results read (:func:`results_read`'s records) as ``machine/name``, grouped by labkit commit
    (``unknown`` where none), in reading order; a CPU timing whose run kept no unit costs says so."""
    out: dict[str, list[str]] = {}
    for r in results:
        speed = " (its run kept no unit costs: how fast its CPU ran then is unknown)" \
            if r.get("unit_costs") is False else ""
        out.setdefault(str(r.get("labkit_commit") or "unknown"), []).append(f"{r.get('machine')}/{r.get('name')}{speed}")
    return out
