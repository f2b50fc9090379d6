"""The report builder: run every lab notebook headless and export offline HTML.

More: docs/reference.md, ``labkit.report.build``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import signal
import sys
import time
from pathlib import Path

from labkit.errors import ReportStopped, UsageError
from labkit.report.execute import CellError, execute_notebook
from labkit.report.index import notebook_summary
from labkit.report.exporter import export_page, notebook_sources
from labkit.report.runs import NotebookRun, public_machine, write_index, save_report_result
from labkit.results import REPO_ROOT, SIZES, labkit_commit

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
NOTEBOOK_GLOB = "[0-9][0-9]_*.py"
STATIC = "_static"

def find_notebooks(notebooks_dir: Path | str = NOTEBOOKS_DIR, only: list[str] | None = None) -> list[Path]:
    """The ``NN_*.py`` notebooks in order; ``only`` keeps names given with or without ``.py``."""
    notebooks_dir = Path(notebooks_dir)
    if not notebooks_dir.is_dir():
        raise UsageError(f"no notebooks folder at {notebooks_dir}")
    found = sorted(notebooks_dir.glob(NOTEBOOK_GLOB))
    if only:
        wanted = {Path(o).name.removesuffix(".py") for o in only}
        missing = wanted - {p.stem for p in found}
        # a bare prefix like "00" also selects 00_environment
        by_prefix = {w for w in missing if any(p.stem.split("_", 1)[0] == w for p in found)}
        if missing - by_prefix:
            raise UsageError(f"no such notebook: {', '.join(sorted(missing - by_prefix))}")
        found = [p for p in found if p.stem in wanted or p.stem.split("_", 1)[0] in by_prefix]
    return found


def read_notebook(path: Path):
    """A jupytext py:percent file as an nbformat notebook."""
    import jupytext

    return jupytext.read(str(path))


def notebook_title(nb, default: str) -> str:
    """The first markdown heading of ``nb`` (without ``#``), else ``default``."""
    return next((line.lstrip("#").strip() for cell in nb.cells if cell.cell_type == "markdown"
                 for line in cell.source.splitlines() if line.startswith("#")), default)


def inject_parameters(nb, params: dict) -> int:
    """Insert a cell (tagged ``injected-parameters``) assigning ``params`` after the ``parameters`` cell; its index."""
    import nbformat

    source = "# Parameters\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    at = next((i + 1 for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), 0)
    nb.cells.insert(at, cell)
    return at


def _error_banner(nb, name: str, err: CellError) -> None:
    import html

    import nbformat

    text = (f'<div class="labkit-error" style="border:2px solid #b00020;padding:8px;color:#b00020">'
            f"<b>{html.escape(name)} did not finish</b>: {html.escape(err.describe())}. "
            "The page shows the outputs up to that cell.</div>")
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(text))


def build_report(out_dir: Path | str = "reports", *, size: str = "quick", device: str = "auto",
                 only: list[str] | None = None, notebooks_dir: Path | str = NOTEBOOKS_DIR, timeout: int = 1800,
                 log=None, save: bool = True, single: bool = False) -> list[NotebookRun]:
    """Execute and export the notebooks into ``out_dir``; return one ``NotebookRun`` each.

    ``log`` (default: print to stderr) gets one progress line per notebook, and a line for
    any reply the client had to be woken for. ``--only`` runs keep the other notebooks'
    earlier entries in the index. ``save`` records the run in the results store
    (:func:`save_report_result`), after each notebook with ``"complete": false`` until the last
    one is done, so a run stopped part-way keeps the rows of the notebooks it finished. ``single``:
    every page carries plotly.js and its style (else the pages share one copy in ``_static``,
    :mod:`labkit.report.pagesize`). A stop signal raises :class:`ReportStopped` after the index
    is written for the notebooks done.
    """
    from labkit.device import resolve_device

    if size not in SIZES:
        raise UsageError(f"unknown size {size!r}: use quick or full")
    resolved = resolve_device(device)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    notebooks_dir = Path(notebooks_dir).resolve()
    paths = find_notebooks(notebooks_dir, only)
    if not paths:
        raise UsageError(f"no notebooks matching {NOTEBOOK_GLOB} in {notebooks_dir}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LABKIT_DEVICE=resolved)

    slug = public_machine(resolved).get("slug") or "unknown"
    runs: list[NotebookRun] = []
    try:
        for i, path in enumerate(paths, 1):
            tag = f"[{i}/{len(paths)}] {path.stem}"
            log(f"{tag} ...")
            run = _run_notebook(path, out_dir, size=size, device=resolved, slug=slug, notebooks_dir=notebooks_dir,
                                timeout=timeout, env=env, log=lambda msg, tag=tag: log(f"{tag}: {msg}"),
                                single=single)
            runs.append(run)
            status = "ok" if run.ok else f"FAILED at {run.error.describe()}"
            log(f"{tag}: {status} ({run.seconds:.1f} s)")
            if save and i < len(paths):  # the notebooks so far, so a stopped run still records them
                save_report_result(runs, size=size, device=resolved, only=only, complete=False)
    finally:
        # also when stopped by a signal: the pages written so far get their index
        write_index(out_dir, runs, size=size, device=resolved, keep_previous=bool(only) or len(runs) < len(paths))
    if save and runs:
        save_report_result(runs, size=size, device=resolved, only=only)
    return runs


def _run_notebook(path: Path, out_dir: Path, *, size: str, device: str, slug: str, notebooks_dir: Path,
                  timeout: int, env: dict, log, single: bool = False) -> NotebookRun:
    """Execute one notebook, export its page and say how it went (``log`` gets stall lines)."""
    import tempfile

    from labkit.report.provenance import KERNEL_SETUP, READS_ENV, results_read

    t0 = time.perf_counter()
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    nb = read_notebook(path)
    title = notebook_title(nb, path.stem)
    summary = notebook_summary(nb)
    at = inject_parameters(nb, {"device": device, "size": size})

    def stalled(cell: int, waited: float) -> None:
        log(f"cell {cell} had replied and the kernel was idle, but the reply was not delivered to the "
            f"client for {waited:.1f} s (lost socket wakeup); read it and went on")

    with tempfile.TemporaryDirectory(prefix="labkit-report-") as tmp:
        reads = Path(tmp) / "results-read.txt"
        execution = execute_notebook(
            nb, cwd=notebooks_dir, timeout=timeout, env=dict(env, **{READS_ENV: str(reads)}), injected_at=at,
            on_stall=stalled, extra_arguments=[f"--IPKernelApp.exec_lines={KERNEL_SETUP}"],
        )
        results, unreadable = results_read(reads)
    err = execution.error
    if err is None and unreadable:
        err = CellError(cell=None, first_line="", error=f"recorded results that did not load: {', '.join(unreadable)}")
    seconds = time.perf_counter() - t0
    if err is not None:
        _error_banner(nb, path.stem, err)
    html_name = f"{path.stem}.html"
    commit = labkit_commit()
    export_page(nb, out_dir / html_name, static_url="" if single else STATIC,
                run={"machine": slug, "device": device, "size": size, "labkit_commit": commit, "results": results})
    return NotebookRun(
        name=path.stem, title=title, html=html_name, ok=err is None, seconds=round(seconds, 1),
        sources=notebook_sources(nb), error=err,
        machine=slug, device=device, labkit_commit=commit, created=created,
        results=results, stalled_replies=len(execution.stalls), summary=summary,
    )


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default="quick", choices=SIZES, help="quick (default) or full sweeps")
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these notebooks (e.g. 00_environment or 00)")
    p.add_argument("--out", default="reports", help="output folder (default: reports)")
    p.add_argument("--notebooks", default=str(NOTEBOOKS_DIR), help="folder of NN_*.py notebooks")
    p.add_argument("--timeout", type=int, default=None,
                   help="seconds allowed per cell (default 300 in quick size, 1800 in full)")
    p.add_argument("--single", action="store_true",
                   help="every page standalone, plotly.js inside it (default: one copy in <out>/_static, "
                        "shared by the pages: keep the folder together)")
    p.add_argument("--no-save", action="store_true",
                   help="do not record the run (report.json / report_quick.json) in the results store")


def _raise_stopped(signum, _frame):
    raise ReportStopped(signum)


def main(args: argparse.Namespace) -> int:
    """``labkit report``: exit 0 when every notebook ran, 1 when any failed, 2 on bad input."""
    if args.timeout is None:
        args.timeout = 300 if args.size == "quick" else 1800
    if args.timeout < 1:
        raise UsageError("--timeout must be at least 1 second")
    t0 = time.perf_counter()
    # SIGTERM stops the run as Ctrl-C does (while a notebook runs, the client handles both)
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        runs = build_report(
            args.out, size=args.size, device=args.device, only=args.only,
            notebooks_dir=args.notebooks, timeout=args.timeout, save=not args.no_save, single=args.single,
        )
    except (ReportStopped, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, ReportStopped) else signal.SIGINT
        print(f"report: stopped by {signal.Signals(signum).name} after {time.perf_counter() - t0:.0f} s; "
              f"the pages finished so far are in {Path(args.out) / 'index.html'}", file=sys.stderr)
        return 128 + int(signum)
    finally:
        signal.signal(signal.SIGTERM, previous)
    failed = [r for r in runs if not r.ok]
    print(f"report: {len(runs) - len(failed)}/{len(runs)} notebooks ok in {time.perf_counter() - t0:.0f} s "
          f"-> {Path(args.out) / 'index.html'}")
    for r in failed:
        print(f"report: FAILED {r.name}: {r.error.describe()}", file=sys.stderr)
    return 1 if failed else 0
