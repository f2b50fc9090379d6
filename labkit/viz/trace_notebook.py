"""Notebook helpers for the trace-analysis lesson (notebook 05): which traces to show, the recorded benchmark."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from labkit.bench import format_table
from labkit.engine.recorded import analyze_recorded
from labkit.results import REPO_ROOT, TRACE_BENCH, find_all, results_table

FIXTURES = REPO_ROOT / "tests" / "data"
#: real non-lab GPU traces of the fixtures (provenance in tests/data/README.md): quick, full
QUICK = "hta-step-based-gpu-annotation-gp100.pt.trace.json.gz"
FULL = "nvllm-gb10-one-step.trimmed.pt.trace.json.gz"


LAB_MACHINE = "h200"
#: the lab variants the lesson compares: #38794 before/after, and #40143's slow scheduler
PER_LAYER, PER_STEP, TENSOR_LOOP = "fast/cursor/per_layer/async", "fast/cursor/per_step/async", "tensor/loop/none/async"


def lab_analyses(variants=(PER_LAYER, PER_STEP, TENSOR_LOOP), machine: str = LAB_MACHINE) -> dict:
    """Variant -> ``labkit.trace.Trace`` of the recorded lab traces that exist (missing ones are left out)."""
    return analyze_recorded(machine, variants=list(variants))


def missing_lab_traces(analyses: dict, variants=(PER_LAYER, PER_STEP, TENSOR_LOOP),
                       machine: str = LAB_MACHINE) -> str:
    """A sentence naming recorded lab traces that are missing ('' when all are there)."""
    gone = [v for v in variants if v not in analyses]
    return (f"No recorded {machine} trace for: {', '.join(gone)} (expected under data/traces/{machine}/)."
            if gone else "")


def fixture_trace(size: str = "quick") -> Path:
    """A real non-lab GPU trace of the fixtures: a small PyTorch profile recorded on a Quadro GP100
    (quick) or one step of a vLLM serving trace recorded on a GB10 (full)."""
    if size not in ("quick", "full"):
        raise ValueError(f"size must be 'quick' or 'full', got {size!r}")
    p = FIXTURES / (FULL if size == "full" else QUICK)
    if not p.is_file():
        raise FileNotFoundError(f"{p.name} not found under tests/data")
    return p


def analyses_sources(*traces) -> list[str]:
    """Source labels of ``Trace`` objects: ``measured-gpu`` for real traces, ``simulated`` for simulated ones."""
    sources = ["simulated" if an.source().get("simulated") else "measured-gpu" for an in traces]
    return list(dict.fromkeys(sources)) or ["measured-gpu"]


def flags_table(trace):
    """The flagged repeated small pageable copies of a ``Trace`` as a table (one row per call site)."""
    return pd.DataFrame(trace.copies().flags)


def bench_table():
    """The recorded ``trace_bench`` results (one per machine) as a table: per trace file and tool, MB/s of
    JSON and its ratio to a bare decode of the same JSON, CPU seconds per MB, peak memory over the JSON's size
    and the speed-ups over ``--jobs 1`` and HTA, CPU per MB over ``--jobs 1``'s and over two ``--jobs 1`` runs
    at once; or a sentence saying there are none."""
    results = find_all(TRACE_BENCH)
    if not results:
        return "No recorded trace_bench result yet: run `labkit bench trace`."
    cols = ["machine", "trace", "variant", "json_bytes", "median_ns", "mb_per_s", "vs_bare_decode", "cpu_s_per_mb",
            "rss_over_json", "speedup_vs_jobs1", "cpu_vs_jobs1", "cpu_vs_two_at_once", "speedup_vs_hta"]
    t = results_table(results)
    t["trace"] = t["trace"].astype(str).str.replace(r"\.pt\.trace\.json(\.gz)?$", "", regex=True)  # a label, not a file
    return format_table(t[[c for c in cols if c in t.columns]],
                        rename={"variant": "tool", "rss_over_json": "peak RSS / JSON", "mb_per_s": "MB/s of JSON",
                                "vs_bare_decode": "vs bare decode", "cpu_s_per_mb": "CPU s / MB",
                                "speedup_vs_jobs1": "vs --jobs 1", "cpu_vs_jobs1": "CPU vs --jobs 1",
                                "cpu_vs_two_at_once": "CPU vs two at once", "speedup_vs_hta": "vs HTA"})
