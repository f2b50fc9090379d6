"""Recording traces of the lab's engine on a real device, as gpt-fast profiles: ``torch_capture``."""

from __future__ import annotations

import gzip
import json
import logging
import re
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from labkit.errors import UsageError
from labkit.fileio import write_atomic

logger = logging.getLogger(__name__)

#: host phases of one engine step, in order (layers are ``forward/layer_{i}``)
PHASES = ("schedule", "prepare_metadata", "forward", "sample")
TRACE_SUFFIX = ".pt.trace.json.gz"
#: TensorBoard's profiler plugin only lists files matching this
TB_TRACE_PATTERN = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(\.gz)?$")
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def layer_phase(index: int) -> str:
    """The record_function name of transformer layer ``index``: ``forward/layer_{index}``."""
    return f"forward/layer_{index}"


def trace_file_name(worker: str, time_ns: int | None = None) -> str:
    """``{worker}.{time_ns}.pt.trace.json.gz`` (the TensorBoard plugin's naming)."""
    return f"{worker}.{time_ns if time_ns is not None else time.time_ns()}{TRACE_SUFFIX}"


def check_run_name(run: str) -> str:
    """Validate a run folder name (letters, digits, ``._+-``); ``UsageError`` otherwise."""
    if not _RUN_NAME.match(run or ""):
        raise UsageError(f"bad run name {run!r}: letters, digits, '.', '_', '+' and '-' only")
    return run


def write_trace(trace: dict, path: str | Path) -> Path:
    """Write a Kineto JSON object gzipped to ``path`` (``trace_path``), atomically: no half-written trace."""
    body = json.dumps(trace, separators=(",", ":")).encode("utf-8")
    # level 6: a ~9% larger file than level 9 for a fifth of the time (traces of tens of MB)
    write_atomic(path, gzip.compress(body, compresslevel=6, mtime=0))
    logger.info("wrote trace %s", path)
    return path


def read_trace(path: str | Path) -> dict:
    """Load a Kineto trace (``.json`` or ``.json.gz``)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def trace_path(root: str | Path, run: str, worker: str = "labkit") -> Path:
    """``<root>/<run>/<worker>.<time_ns>.pt.trace.json.gz`` (the folder made; ``run`` checked)."""
    folder = Path(root) / check_run_name(run)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / trace_file_name(worker)


@contextmanager
def torch_capture(path: str | Path, *, cuda: bool, metadata: dict | None = None, warmup: int = 1, active: int = 3):
    """``torch.profiler.profile`` around the run, yielded: call its ``step()`` after each engine step.

    ``warmup`` steps, then ``active`` recorded ones; the gzip'ed file carries ``metadata`` under ``labkit``.
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=activities, schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
                     on_trace_ready=lambda prof: prof.export_chrome_trace(str(path))) as prof:
            prof.add_metadata_json("labkit", json.dumps(metadata or {}, default=str))
            yield prof


def warm_up_profiler(cuda: bool) -> None:
    """Start and stop ``torch.profiler`` once on a trivial op, so Kineto's one-off start lands in no run."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=activities):
            x = torch.zeros(1, device="cuda" if cuda else "cpu")
            x.add_(1)
            if cuda:
                torch.cuda.synchronize()
