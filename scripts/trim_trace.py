"""Trim a Kineto trace to its first profiled steps, so that recorded traces stay small (the GPU run's packer,
scripts/pack_gpu_check.py, and the fixtures of tests/data).

    python scripts/trim_trace.py SRC DST [--steps N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import UsageError
from labkit.fileio import write_atomic
from labkit.trace.analysis.host.steps import STEP_NUMBER

_FLOW = ("s", "f", "t")


@dataclass(frozen=True)
class TrimStats:
    """What ``trim_trace`` kept: events in/out, steps in the file and kept, window in us."""

    events_in: int
    events_out: int
    steps_in: int
    steps_kept: int
    window_start_us: float
    window_end_us: float


def read_trace_json(path: str | Path) -> dict:
    """The JSON document of a (gzip'ed) Kineto trace file."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UsageError(f"{path}: no traceEvents array")
    return doc


def step_starts(events: list[dict]) -> list[float]:
    """Sorted start times (us) of the host-side ``ProfilerStep#N`` ranges."""
    return sorted(
        float(e["ts"]) for e in events
        if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation"
        and "ts" in e and (m := STEP_NUMBER.match(str(e.get("name", "")))) and m.end() == len(str(e["name"]))
    )


def trim_events(events: list[dict], steps: int = 1) -> tuple[list[dict], TrimStats] | None:
    """The events of the first ``steps`` profiled steps (docs/reference.md), or None
    when the trace has no ``ProfilerStep`` ranges."""
    if steps < 1:
        raise UsageError("steps must be at least 1")
    starts = step_starts(events)
    if not starts:
        return None
    start = starts[0]
    end = starts[steps] if len(starts) > steps else float("inf")

    def inside(e: dict) -> bool:
        return e.get("ph") == "M" or "ts" not in e or start <= float(e["ts"]) < end

    kept = [e for e in events if inside(e)]
    ends: dict[object, set[str]] = {}
    for e in kept:
        if e.get("ph") in _FLOW:
            ends.setdefault((e.get("cat"), e.get("id")), set()).add(e["ph"])
    paired = {k for k, phs in ends.items() if "s" in phs and "f" in phs}
    kept = [e for e in kept if e.get("ph") not in _FLOW or (e.get("cat"), e.get("id")) in paired]
    stats = TrimStats(
        events_in=len(events), events_out=len(kept), steps_in=len(starts),
        steps_kept=min(steps, len(starts)), window_start_us=start, window_end_us=end,
    )
    return kept, stats


def trim_trace(src: str | Path, dst: str | Path, steps: int = 1) -> TrimStats | None:
    """Write the first ``steps`` profiled steps of ``src`` to ``dst`` (gzip'ed when ``dst``
    ends in ``.gz``); None, and nothing written, when ``src`` has no ``ProfilerStep`` ranges."""
    doc = read_trace_json(src)
    trimmed = trim_events(doc["traceEvents"], steps)
    if trimmed is None:
        return None
    events, stats = trimmed
    doc["traceEvents"] = events
    text = json.dumps(doc, separators=(",", ":")).encode()
    write_atomic(dst, gzip.compress(text, compresslevel=9) if str(dst).endswith(".gz") else text)
    return stats


def main(argv: list[str] | None = None) -> int:
    """``trim SRC DST [--steps N]``: exit 0 trimmed, 1 nothing to trim, 2 bad input (one line on stderr)."""
    p = argparse.ArgumentParser(prog="trim", description=__doc__.splitlines()[0])
    p.add_argument("src", help="Kineto trace (.json or .json.gz)")
    p.add_argument("dst", help="output file (.json.gz is gzip'ed)")
    p.add_argument("--steps", type=int, default=1, help="profiled steps to keep (default 1)")
    args = p.parse_args(argv)
    try:
        if not Path(args.src).is_file():
            raise UsageError(f"no such file: {args.src}")
        stats = trim_trace(args.src, args.dst, args.steps)
    except UsageError as exc:
        print(f"trim: {exc}", file=sys.stderr)
        return 2
    if stats is None:
        print(f"trim: {args.src} has no ProfilerStep ranges: not trimmed", file=sys.stderr)
        return 1
    print(f"trim: {stats.events_in} -> {stats.events_out} events, {stats.steps_kept}/{stats.steps_in} steps -> {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
