"""HTA's idle-time breakdown of the real traces, run live or read from its recording.

HTA (``traceinsight``) takes seconds on the larger shared traces, so its figures for those are
recorded in ``tests/data/hta_idle_reference.json`` by ``python tests/hta_reference.py`` (HTA
run live on each file). ``recorded(path)`` gives them when they were made by the installed HTA
version from a file with the same sha256, and None otherwise (or always with
``LABKIT_LIVE_HTA=1``): the tests then run HTA live. The recording also holds smaller traces
(``CHECKED``: fixtures of ``tests/data``, and one more of the shared collection), on which the
tests run HTA live and check the recording against it.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from real_traces import SHARED, find

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "data" / "hta_idle_reference.json"
#: the traces HTA is slowest on (a second to several each): their figures come from the recording
RECORDED = ("hta-ns-resolution-v100-rank0.pt.trace.json.gz", "hta-trace-diff-control-a100-rank3.pt.trace.json.gz",
            "nvllm-vllm-qwen3.5-27b-nvfp4-flashinfer-gb10-rank0.pt.trace.json.gz",
            "param-linear-kineto-rtx2080ti.pt.trace.json.gz", "tracelens-h100-timesformer-k400-inference.pt.trace.json.gz")
#: recorded as well, small enough to run live in every test run (the recording's check): two
#: fixtures (the BERT one is also in the shared collection, byte for byte) and a shared trace
CHECKED = ("tracelens-h100-bert-small-inference.pt.trace.json.gz",
           "hta-trace-diff-control-a100-rank3.last-step-start.pt.trace.json.gz",
           "tracelens-h100-qwen1.5-0.5b-chat-inference.pt.trace.json.gz")
COLUMNS = ["stream", "idle_category", "idle_time"]


@functools.lru_cache(maxsize=2)
def raw_trace(path: Path) -> dict:
    """The whole trace document, read with the standard library (an independent reader)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def hta_version() -> str | None:
    try:
        return importlib.metadata.version("traceinsight")
    except importlib.metadata.PackageNotFoundError:
        return None


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.lru_cache(maxsize=4)
def hta_live(path: Path, include_last_profiler_step: bool = False) -> pd.DataFrame:
    """HTA's ``get_idle_time_breakdown`` for the trace's rank (HTA reads a folder: a copy of the file)."""
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    rank = raw_trace(path).get("distributedInfo", {}).get("rank", 0)
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, Path(d) / path.name)
        ta = TraceAnalysis(trace_dir=d, include_last_profiler_step=include_last_profiler_step)
        df, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
    return df


def recorded(path: Path) -> pd.DataFrame | None:
    """The recorded breakdown of ``path``, or None when there is none for this file and HTA version."""
    if os.environ.get("LABKIT_LIVE_HTA") == "1" or not REFERENCE.is_file():
        return None
    ref = json.loads(REFERENCE.read_text())
    entry = ref["traces"].get(path.name)
    if entry is None or ref["hta_version"] != hta_version() or entry["sha256"] != sha256(path):
        return None
    return pd.DataFrame(entry["rows"], columns=COLUMNS)


def _rows(df: pd.DataFrame) -> list:
    return [[int(s), str(c), float(t)] for s, c, t in df[COLUMNS].itertuples(index=False)]


def main(argv: list[str]) -> int:
    """Run HTA on each recorded trace (fixtures and the shared collection) and write the reference file."""
    version = hta_version()
    if version is None:
        print("hta_reference: traceinsight is not installed", file=sys.stderr)
        return 2
    traces = {}
    for name in RECORDED + CHECKED:
        path = find(name)
        if path is None:
            print(f"hta_reference: {name} is neither in tests/data nor in {SHARED}", file=sys.stderr)
            return 2
        traces[name] = {"sha256": sha256(path), "rows": _rows(hta_live(path))}
    doc = {"tool": "traceinsight", "hta_version": version, "call": "TraceAnalysis.get_idle_time_breakdown(ranks=[rank])",
           "made_by": "python tests/hta_reference.py", "columns": COLUMNS, "traces": traces}
    tmp = REFERENCE.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(REFERENCE)
    print(f"wrote {REFERENCE} ({len(traces)} traces, traceinsight {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
