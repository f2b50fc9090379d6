"""Recording traces of the lab's engine: torch.profiler on a real device, or the simulated device's timeline.

``make_capture(device, trace_dir, run, metadata)`` gives a ``NullCapture`` (no tracing), a
``TorchCapture`` (a wait/warm-up/active schedule, the profiler's step markers, the run's metadata
stamped on the file) or a ``SimCapture`` (the same on the simulated host timeline); files are
``<root>/<run>/<worker>.<time_ns>.pt.trace.json.gz``. Engine phases: ``PHASES``, ``layer_phase``.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import time
import warnings
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


def write_trace(trace: dict, root: str | Path, run: str, worker: str = "labkit") -> Path:
    """Write a Kineto JSON object gzipped to ``<root>/<run>/<worker>.<time_ns>.pt.trace.json.gz``.

    The write is atomic (temporary file, then rename), so no half-written trace is left behind.
    """
    folder = Path(root) / check_run_name(run)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / trace_file_name(worker)
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


class NullCapture:
    """No tracing: a context manager whose ``step()`` does nothing."""

    paths: list[Path] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def step(self) -> None:
        return None


class _Schedule:
    def __init__(self, wait: int, warmup: int, active: int) -> None:
        if wait < 0 or warmup < 0 or active < 1:
            raise UsageError(f"profile schedule needs wait >= 0, warmup >= 0, active >= 1 "
                             f"(got {wait}, {warmup}, {active})")
        self.wait, self.warmup, self.active = wait, warmup, active

    @property
    def first_active(self) -> int:
        return self.wait + self.warmup

    @property
    def total(self) -> int:
        return self.wait + self.warmup + self.active


class TorchCapture(_Schedule):
    """``torch.profiler.profile`` with a schedule, TensorBoard naming and stamped metadata."""

    def __init__(self, root: str | Path, run: str, *, cuda: bool, metadata: dict | None = None,
                 worker: str = "labkit", wait: int = 0, warmup: int = 1, active: int = 3) -> None:
        super().__init__(wait, warmup, active)
        self.folder = Path(root) / check_run_name(run)
        self.cuda = cuda
        self.metadata = dict(metadata or {})
        self.worker = worker
        self.paths: list[Path] = []
        self._prof = None
        self._before: set[Path] = set()

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        self.folder.mkdir(parents=True, exist_ok=True)
        self._before = set(self.folder.glob("*" + TRACE_SUFFIX))
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self._prof = profile(
                activities=activities,
                schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
                on_trace_ready=tensorboard_trace_handler(str(self.folder), worker_name=self.worker, use_gzip=True),
            )
            self._prof.__enter__()
        self._stamped = False
        self._stamp()
        return self

    def step(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self._prof.step()
        self._stamp()

    def _stamp(self) -> None:
        # metadata only sticks while Kineto is running (warm-up or active), so stamp every step
        # until the active window has been reached
        if not self._stamped and self._prof.step_num >= self.wait:
            self._prof.add_metadata_json("labkit", json.dumps(self.metadata, default=str))
            self._stamped = self._prof.step_num >= self.first_active

    def __exit__(self, *exc) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self._prof.__exit__(*exc)
        self.paths = sorted(set(self.folder.glob("*" + TRACE_SUFFIX)) - self._before)


class SimCapture(_Schedule):
    """The same schedule and ``ProfilerStep#N`` spans on a ``SimDevice``; writes one Kineto file."""

    def __init__(self, device, root: str | Path, run: str, *, metadata: dict | None = None,
                 worker: str = "labkit", wait: int = 0, warmup: int = 1, active: int = 3) -> None:
        super().__init__(wait, warmup, active)
        self.device = device
        self.root = Path(root)
        self.run = check_run_name(run)
        self.metadata = dict(metadata or {})
        self.worker = worker
        self.paths: list[Path] = []
        self._step = 0
        self._step_start = 0
        self._window: list[int] = []

    def __enter__(self):
        self.device.record = self.first_active == 0
        self.device.reset_records()
        self._step = 0
        self._step_start = self.device.now_ns()
        if self.first_active == 0:
            self._window = [self._step_start]
        return self

    def step(self) -> None:
        now = self.device.now_ns()
        n = self._step
        if self.first_active <= n < self.total:
            self.device.mark(f"ProfilerStep#{n}", self._step_start, now)
            self._window = [self._window[0] if self._window else self._step_start, now]
        self._step = n + 1
        self._step_start = now
        if self._step == self.first_active:
            self.device.record = True
            self._window = [now]
        elif self._step >= self.total:
            self.device.record = False

    def __exit__(self, exc_type, *exc) -> None:
        from labkit.engine.device.sim_trace import build_sim_trace

        self.device.record = True  # build_sim_trace checks the device has recorded
        try:
            if exc_type is None and len(self._window) == 2:
                trace = build_sim_trace(self.device, window=(self._window[0], self._window[1]),
                                        metadata=self.metadata)
                self.paths = [write_trace(trace, self.root, self.run, self.worker)]
            elif exc_type is None:
                logger.warning("no complete active profiler step: no trace written for run %s", self.run)
        finally:
            self.device.record = False
            self.device.reset_records()


def warm_up_profiler(cuda: bool) -> None:
    """Start and stop ``torch.profiler`` once on a trivial op.

    The first profiler start in a process initialises Kineto (and CUPTI on a GPU), which can hold
    the host for seconds; doing it here keeps that one-off cost out of every measured or traced
    engine run that follows.
    """
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


def make_capture(device, trace_dir: str | Path | None, run: str = "run", *, metadata: dict | None = None,
                 worker: str = "labkit", wait: int = 0, warmup: int = 1, active: int = 3):
    """A capture for ``device``: ``NullCapture`` when ``trace_dir`` is None, else Sim/Torch capture."""
    if trace_dir is None:
        return NullCapture()
    if getattr(device, "kind", None) == "sim":
        return SimCapture(device, trace_dir, run, metadata=metadata, worker=worker,
                          wait=wait, warmup=warmup, active=active)
    return TorchCapture(trace_dir, run, cuda=bool(getattr(device, "is_cuda", False)), metadata=metadata,
                        worker=worker, wait=wait, warmup=warmup, active=active)
