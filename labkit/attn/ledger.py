"""Transfer ledger: the host-to-device copies and host time of a prefix-range strategy, step by step.

More: docs/reference.md, ``labkit.attn.ledger``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from labkit.timing import clock_ns


@dataclass(frozen=True)
class CopyRecord:
    """One host-to-device copy.

    ``nbytes`` is the payload in bytes; ``pinned`` says whether the host buffer was pinned;
    ``synchronizing`` whether the host waits for the copy (pageable, no ``non_blocking``);
    ``what`` names the copy (``"row"``, ``"nested_offsets"``, ``"padded"``); ``layer`` is the
    attention layer that triggered it (None for once-per-step copies).
    """

    step: int
    nbytes: int
    pinned: bool
    synchronizing: bool
    what: str
    layer: int | None
    target: str


@dataclass
class StepCopies:
    """Per-step totals: copies, bytes and host time in nanoseconds."""

    step: int
    copies: list[CopyRecord] = field(default_factory=list)
    host_ns: int = 0
    uploads: int = 0  # device tensors built this step (0 for a cache hit)


class TransferLedger:
    """Per-step record of the H2D copies and host time of one strategy; ``rows()``: one row per step."""

    def __init__(self, strategy: str = "", device: str = "cpu") -> None:
        self.strategy = strategy
        self.device = str(device)
        self.target = "cuda-h2d" if self.device.startswith("cuda") else "cpu-equivalent"
        self.steps: list[StepCopies] = []
        self._open: StepCopies | None = None

    # -- recording -----------------------------------------------------------------
    def begin_step(self) -> None:
        """Open a new step (closing any step left open)."""
        if self._open is not None:
            self.end_step()
        self._open = StepCopies(step=len(self.steps))

    def end_step(self) -> None:
        """Close the current step (no-op if none is open)."""
        if self._open is not None:
            self.steps.append(self._open)
            self._open = None

    def _current(self) -> StepCopies:
        if self._open is None:
            self.begin_step()
        assert self._open is not None
        return self._open

    def record_copy(
        self, nbytes: int, *, pinned: bool, synchronizing: bool, what: str, layer: int | None = None
    ) -> None:
        """Record one host-to-device copy of ``nbytes`` bytes in the open step."""
        cur = self._current()
        cur.copies.append(CopyRecord(cur.step, int(nbytes), bool(pinned), bool(synchronizing), what, layer,
                                     self.target))

    def record_upload(self) -> None:
        """Count one device tensor built in the open step."""
        self._current().uploads += 1

    def add_host_ns(self, ns: int) -> None:
        """Add ``ns`` nanoseconds of host time to the open step."""
        self._current().host_ns += int(ns)

    def timed(self) -> "_HostTimer":
        """Context manager adding the wall time of its body (labkit.timing.clock_ns) to the open step."""
        return _HostTimer(self)

    def reset(self) -> None:
        """Forget every recorded step."""
        self.steps.clear()
        self._open = None

    # -- reading -------------------------------------------------------------------
    def all_steps(self) -> list[StepCopies]:
        """Closed steps, plus the open one if any."""
        return self.steps + ([self._open] if self._open is not None else [])

    def rows(self) -> list[dict]:
        """One tidy row per step: counts, bytes, host time (``_ns``), and what the copies are."""
        out = []
        for s in self.all_steps():
            pinned = sum(1 for c in s.copies if c.pinned)
            out.append({"strategy": self.strategy, "device": self.device, "target": self.target, "step": s.step,
                        "h2d_count": len(s.copies), "h2d_bytes": sum(c.nbytes for c in s.copies),
                        "pageable_count": len(s.copies) - pinned, "pinned_count": pinned,
                        "sync_count": sum(1 for c in s.copies if c.synchronizing), "uploads": s.uploads,
                        "host_ns": s.host_ns})
        return out

    def copy_rows(self) -> list[dict]:
        """One tidy row per copy (``nbytes`` in bytes)."""
        return [{"strategy": self.strategy, **asdict(c)} for s in self.all_steps() for c in s.copies]

    def totals(self) -> dict:
        """Counts summed over all steps: ``h2d_count``, ``pageable_count``, ``pinned_count``, ``h2d_bytes``."""
        rows = self.rows()
        keys = ("h2d_count", "pageable_count", "pinned_count", "sync_count", "h2d_bytes", "uploads", "host_ns")
        return {k: sum(r[k] for r in rows) for k in keys} | {"steps": len(rows)}


class _HostTimer:
    __slots__ = ("ledger", "t0")

    def __init__(self, ledger: TransferLedger) -> None:
        self.ledger = ledger
        self.t0 = 0

    def __enter__(self) -> "_HostTimer":
        self.t0 = clock_ns()
        return self

    def __exit__(self, *exc) -> None:
        self.ledger.add_host_ns(clock_ns() - self.t0)


# -- checking against a profiler trace ----------------------------------------------
# Read with the trace analyzer's loader and idle rules (labkit.trace), so these figures are
# the ones `labkit analyze` reports for the same file.

def _as_trace(trace):
    """A ``labkit.trace`` Trace from a dict, a path (.json / .json.gz) or a stopped profiler."""
    from labkit.trace.read.load import as_trace

    if isinstance(trace, (str, os.PathLike)) and not Path(trace).is_file():
        raise ValueError(f"no trace file at {trace}")
    if isinstance(trace, (str, os.PathLike, dict)):
        return as_trace(trace)
    if hasattr(trace, "export_chrome_trace"):
        fd, tmp = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            trace.export_chrome_trace(tmp)
            return as_trace(tmp)
        finally:
            os.unlink(tmp)
    raise ValueError(f"cannot read a trace from {type(trace).__name__}: give a dict, a path or a profiler")


def count_h2d_in_profile(trace) -> dict:
    """Count host-to-device memcpy events in a profiler trace.

    ``trace``: a ``torch.profiler.profile`` (after it stopped), a path to an exported Chrome
    trace (``.json`` or ``.json.gz``), or the decoded dict. Returns ``pageable_count``,
    ``pinned_count``, ``h2d_count`` and the bytes of each (``*_bytes``, from ``args.bytes``;
    absent counts as 0): the pageable and pinned rows of ``Trace.h2d()``.
    """
    from labkit.trace import Trace

    h2d = Trace(_as_trace(trace)).h2d()
    out = {}
    for kind in ("pageable", "pinned"):
        rows = h2d[h2d["kind"] == kind]
        out[f"{kind}_count"], out[f"{kind}_bytes"] = len(rows), int(rows["bytes"].clip(lower=0).sum())
    out["h2d_count"] = out["pageable_count"] + out["pinned_count"]
    out["h2d_bytes"] = out["pageable_bytes"] + out["pinned_bytes"]
    return out


def gpu_stream_busy_idle(trace) -> list[dict]:
    """Busy and idle time per GPU stream between its first and last event, in microseconds (``Trace.idle()``)."""
    from labkit.trace import Trace

    return [{"device": int(r.device), "stream": int(r.stream), "events": int(r.ops_count), "busy_us": float(r.busy_us),
             "idle_us": float(r.idle_us), "span_us": float(r.span_us)}
            for r in Trace(_as_trace(trace)).idle().itertuples()]
