"""Hand-made Kineto documents for the what-if tests: host spans, runtime calls and device ops
with times in microseconds, written as a gzipped trace the loader reads like any other."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def X(name, cat, ts, dur, *, pid=1, tid=1, **args):
    """A complete event (``ph: X``) on host thread ``(pid, tid)``; ``args`` go into its ``args``."""
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def K(name, ts, dur, corr, cat="kernel", **args):
    """A device op on device 0, stream 7, joined to its launch call by ``corr``."""
    return X(name, cat, ts, dur, pid=0, tid=7, device=0, stream=7, correlation=corr, **args)


def write_trace(path: Path, events, labkit=None) -> Path:
    """Write ``events`` as a gzipped Kineto trace (one hand-made GPU; ``labkit``: the lab's metadata)."""
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "hand-made GPU"}], "traceEvents": events}
    if labkit is not None:
        doc["labkit"] = labkit
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path
