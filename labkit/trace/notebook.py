"""Notebook helpers for the trace-analysis lesson: which trace to show and the recorded benchmark.

Kept out of the notebook so its cells stay one or two lines and the choice is testable.
"""

from __future__ import annotations

from pathlib import Path

from labkit.results import REPO_ROOT, data_root, load_results

SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces"
FIXTURES = REPO_ROOT / "tests" / "data"
#: real GPU traces to fall back on, small first: (quick, full)
QUICK = "hta-step-based-gpu-annotation-gp100.pt.trace.json.gz"
FULL = "nvllm-vllm-qwen3.5-27b-nvfp4-flashinfer-gb10-rank0.pt.trace.json.gz"


def find_notebook_trace(size: str = "quick") -> Path:
    """A real GPU trace to analyse: a lab trace under ``data/traces/`` recorded on a GPU if any
    (at most 20 MB in quick mode), else the vLLM trace of the shared collection (full) or a small
    fixture (quick)."""
    from labkit.trace.load import load_trace

    if size not in ("quick", "full"):
        raise ValueError(f"size must be 'quick' or 'full', got {size!r}")
    lab = sorted((data_root() / "traces").rglob("*.pt.trace.json*"))
    for p in lab[:10]:
        if size == "quick" and p.stat().st_size > 20e6:
            continue
        try:
            tr = load_trace(p)
        except ValueError:
            continue
        if not tr.is_simulated and tr.has_device_events():
            return p
    for p in ([SHARED_TRACES / FULL] if size == "full" else []) + [FIXTURES / QUICK, SHARED_TRACES / QUICK]:
        if p.is_file():
            return p
    raise FileNotFoundError("no GPU trace found under data/traces, ../shared/traces or tests/data")


def trace_sources(path) -> list[str]:
    """The source badge for a trace: ``simulated`` or ``measured-gpu``."""
    from labkit.trace.load import load_trace

    return ["simulated"] if load_trace(path).is_simulated else ["measured-gpu"]


def recorded_bench():
    """The recorded ``trace_bench`` results (all machines) as a table, or a sentence saying there are none."""
    results = load_results(name="trace_bench")
    if not results:
        return "No recorded trace_bench result yet: run `labkit bench trace`."
    from labkit.results import results_table

    cols = ["machine", "source", "variant", "file_bytes", "median_ns", "peak_rss_bytes", "rss_over_file",
            "speedup_vs_hta"]
    t = results_table(results)
    return t[[c for c in cols if c in t.columns]]
