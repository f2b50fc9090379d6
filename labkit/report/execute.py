"""Executing one notebook for the report, and saying where it stopped if it did."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from labkit.errors import ReportStopped
from labkit.report import KERNEL_EXEC_LINES

#: a line a cell prints (stdout, stderr, a log record) that says a check failed: "x failed: why",
#: "FAILED: ...", or an exception's name ("InterpreterError: ...")
FAILURE_LINE = re.compile(r"\b(?:failed|FAILED)\b:|\b[A-Z]\w*Error\b")


@dataclass
class CellError:
    """Where and why a notebook stopped: ``cell`` counts the notebook's own cells from 0."""

    cell: int | None
    first_line: str
    error: str

    def describe(self) -> str:
        if self.cell is None and not self.first_line:
            return self.error
        where = f"cell {self.cell}" if self.cell is not None else "kernel"
        line = f" `{self.first_line}`" if self.first_line else ""
        return f"{where}{line}: {self.error}"


@dataclass
class Execution:
    """How a run went: the error (None when every cell ran) and the replies the watch had to
    read (``(cell, waited_s)``, cells in the source notebook's numbering)."""

    error: CellError | None
    stalls: list[tuple[int, float]] = field(default_factory=list)


def _first_line(source: str) -> str:
    return next((line.strip()[:120] for line in source.splitlines() if line.strip()), "")


def _failed_cell(nb) -> tuple[int | None, str]:
    """Index and first line of the cell that failed: the one with an error output, else
    the last cell the kernel started (a timeout or a dead kernel)."""
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", [])):
            return i, _first_line(c.source)
    started = [
        i for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and "iopub.execute_input" in c.get("metadata", {}).get("execution", {})
    ]
    if started:
        return started[-1], _first_line(nb.cells[started[-1]].source)
    return None, ""


def printed_failure(nb) -> CellError | None:
    """The first line a code cell printed that says a check failed, as the cell's error."""
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        for o in c.get("outputs", []):
            text = o.get("text", "") if o.get("output_type") == "stream" else ""
            line = next((ln.strip() for ln in text.splitlines() if FAILURE_LINE.search(ln)), None)
            if line:
                return CellError(cell=i, first_line=_first_line(c.source), error=f"printed: {line[:300]}")
    return None


def _error_text(nb, exc: BaseException) -> str:
    for c in nb.cells:
        for o in c.get("outputs", []):
            if o.get("output_type") == "error":
                return f"{o.get('ename', 'Error')}: {o.get('evalue', '')}".strip()[:300]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"[:300]


def execute_notebook(nb, *, cwd: Path, timeout: int, env: dict | None = None, injected_at: int | None = None,
                     on_stall: Callable[[int, float], None] | None = None,
                     extra_arguments: list[str] | None = None) -> Execution:
    """Run ``nb`` in place with a fresh python3 kernel.

    ``injected_at``: index of an injected parameters cell, so that cell positions are
    given in the source notebook's own numbering. ``on_stall(cell, waited_s)`` hears of
    each reply that was ready but not delivered (see :mod:`labkit.report.client`).
    ``extra_arguments`` go to the kernel's command line.
    """
    from labkit.report.client import ReportClient

    def own_index(index: int | None) -> int | None:
        if index is not None and injected_at is not None and index > injected_at:
            return index - 1
        return index

    stalls: list[tuple[int, float]] = []

    def stalled(index: int, waited: float) -> None:
        stalls.append((own_index(index), waited))
        if on_stall is not None:
            on_stall(own_index(index), waited)

    client = ReportClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        store_widget_state=False,  # an exported page shows no ipywidget (labkit.report.exporter)
        record_timing=True,
        # once the last cell has replied the kernel's process group is killed: everything a notebook
        # writes is written and closed inside its cells, and a graceful shutdown only waited for the
        # interpreter's teardown (seconds after a notebook that holds a lot); nothing it started lives on
        shutdown_kernel="immediate",
        allow_errors=False,
        # no transport noise (nor the shutdown's "KeyboardInterrupt caught") in the progress log
        extra_arguments=["--IPKernelApp.log_level=CRITICAL",
                         *(f"--IPKernelApp.exec_lines={line}" for line in KERNEL_EXEC_LINES),  # start-up: lean
                         *(extra_arguments or [])],
        on_stall=stalled,
    )
    # nbclient restores the default SIGINT / SIGTERM handlers when a run ends: keep ours
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        client.execute(**({} if env is None else {"env": env}))  # env=None would mean an empty one
    except ReportStopped:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure is reported, never raised
        index, first = _failed_cell(nb)
        return Execution(CellError(cell=own_index(index), first_line=first, error=_error_text(nb, exc)), stalls)
    finally:
        for s, handler in saved.items():
            try:
                signal.signal(s, handler)
            except (ValueError, TypeError):  # not the main thread, or a handler set outside Python
                pass
    printed = printed_failure(nb)
    if printed is not None:
        printed.cell = own_index(printed.cell)
    return Execution(printed, stalls)
