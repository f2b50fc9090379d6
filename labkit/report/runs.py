"""The record of a report run: one ``NotebookRun`` per notebook, the manifest, and the ``report`` result."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.fileio import write_atomic, write_json
from labkit.report.execute import CellError
from labkit.report.findings import lab_findings
from labkit.report.index import render_index
from labkit.results import REPORT, find_all, labkit_commit, make_result, save_result, sized_name

MANIFEST = "report.json"


@dataclass
class NotebookRun:
    """The outcome of one notebook: page written, seconds taken, sources it declared, one line
    on what it shows (``summary``, :func:`labkit.report.index.notebook_summary`), where
    it ran (``machine`` slug, ``device``, ``labkit_commit``, ``created``), the recorded
    results it read (see :func:`labkit.report.provenance.results_read`) and how many
    replies the client's watch had to read (``stalled_replies``)."""

    name: str
    title: str
    html: str | None
    ok: bool
    seconds: float
    sources: list[str] = field(default_factory=list)
    error: CellError | None = None
    machine: str = ""
    device: str = ""
    labkit_commit: str = ""
    created: str = ""
    results: list[dict] = field(default_factory=list)
    stalled_replies: int = 0
    summary: str = ""


def public_machine(device: str) -> dict:
    from labkit.device import describe_machine

    keys = ("slug", "device", "gpu_name", "gpu_memory_gib", "gpu_sm_count", "gpu_capability", "driver",
            "cuda", "torch", "triton", "python", "cpu_model", "cpu_cores", "os", "kernel_mode")
    desc = describe_machine(device)
    return {k: desc.get(k) for k in keys}


def _load_manifest(out_dir: Path) -> dict:
    try:
        return json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _run_from_json(d: dict) -> NotebookRun:
    err = d.get("error")
    return NotebookRun(name=d["name"], title=d.get("title", d["name"]), html=d.get("html"), ok=bool(d.get("ok")),
                       seconds=float(d.get("seconds", 0.0)), sources=list(d.get("sources", [])),
                       error=CellError(**err) if err else None, machine=str(d.get("machine", "")),
                       device=str(d.get("device", "")), labkit_commit=str(d.get("labkit_commit", "")),
                       created=str(d.get("created", "")), results=list(d.get("results", [])),
                       stalled_replies=int(d.get("stalled_replies", 0)), summary=str(d.get("summary", "")))


def write_index(out_dir: Path, runs: list[NotebookRun], *, size: str, device: str, keep_previous: bool) -> None:
    """Write ``report.json`` and ``index.html``; ``keep_previous`` keeps the earlier entries of
    notebooks not run this time (an ``--only`` run, or a run stopped part-way)."""
    previous = _load_manifest(out_dir).get("notebooks", []) if keep_previous else []
    names = {r.name for r in runs}
    kept = [_run_from_json(d) for d in previous
            if d.get("name") not in names and (out_dir / str(d.get("html"))).is_file()]
    all_runs = sorted(runs + kept, key=lambda r: r.name)
    meta = {"created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "labkit_commit": labkit_commit(), "size": size, "device": device, "machine": public_machine(device),
            "notebooks": [asdict(r) for r in all_runs], "findings": lab_findings()}
    write_json(out_dir / MANIFEST, meta)
    write_atomic(out_dir / "index.html", render_index(meta))


def report_rows(runs: list[NotebookRun]) -> list[dict]:
    """One flat row per notebook for the results store: ``notebook``, ``device``, ``seconds``,
    ``status`` (``ok`` or the error), ``stalled_replies``, and the run's ``labkit_commit`` and
    ``created`` (rows kept from an earlier run by an ``--only`` run keep theirs)."""
    return [
        {"notebook": r.name, "device": r.device, "seconds": r.seconds,
         "status": "ok" if r.ok else (r.error.describe() if r.error else "failed"),
         "stalled_replies": r.stalled_replies, "labkit_commit": r.labkit_commit, "created": r.created}
        for r in runs
    ]


def save_report_result(runs: list[NotebookRun], *, size: str, device: str, only: list[str] | None = None,
                       complete: bool = True):
    """Record the run as the result ``report`` (``report_quick`` in quick size); returns the saved ``BenchResult``.

    An ``--only`` run keeps the other notebooks' rows; ``complete=False`` saves a run still going.
    """
    name = sized_name(REPORT, size)
    rows = report_rows(runs)
    if only:  # keep the rows of the notebooks this run left out
        machine = public_machine(device).get("slug")
        earlier = next(iter(find_all(REPORT, machine=machine, size=size)), None)
        done = {r["notebook"] for r in rows}
        kept = [r for r in (earlier.rows if earlier else []) if r.get("notebook") not in done]
        rows = sorted(rows + kept, key=lambda r: str(r.get("notebook")))
    result = make_result(
        name, rows,
        params={"size": size, "device": device, "only": list(only) if only else None},
        source="measured-gpu" if device == "cuda" else "measured-cpu", size=size,
    )
    result.complete = complete
    save_result(result)
    return result
