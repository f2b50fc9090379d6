"""``labkit bench trace``'s rows: per trace file and tool, MB/s of JSON text and peak memory."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import labkit.trace.analysis.bench as bench
from labkit.trace.analysis.bench import decompressed_bytes, measure_file

DATA = Path(__file__).resolve().parent / "data"
FILES = [DATA / "hta-triton-example-a100.pt.trace.json.gz", DATA / "nvllm-gb10-one-step.trimmed.pt.trace.json.gz"]


def test_per_trace_rows_measure_each_file():
    t0 = time.perf_counter_ns()
    rows = [r for f in FILES for r in measure_file(f, f.name, timeout=300, jobs=(1,), hta=False)]
    elapsed_ns = time.perf_counter_ns() - t0
    assert [r["trace"] for r in rows] == [f.name for f in FILES] and {r["variant"] for r in rows} == {"labkit"}
    for f, r in zip(FILES, rows):
        assert "error" not in r, r
        assert r["json_bytes"] == len(gzip.decompress(f.read_bytes())) == decompressed_bytes(f)
        assert r["file_bytes"] == f.stat().st_size
        assert r["peak_rss_bytes"] > r["analysis_rss_bytes"] > 0
    # each worker's own time is part of the time the whole call took, measured out here
    assert sum(r["median_ns"] for r in rows) < elapsed_ns
    assert all(r["mb_per_s"] > r["json_bytes"] / 1e6 / (elapsed_ns / 1e9) for r in rows)
    # the bigger trace needs more memory than the tiny one (peak of a fresh process per file)
    assert rows[1]["analysis_rss_bytes"] > rows[0]["analysis_rss_bytes"]


def test_rows_from_planted_worker_runs(monkeypatch):
    """The row's figures from worker runs whose times and memory are planted: the median of three
    runs, MB/s of the file's JSON text (not of the gzip'ed file), memory over the interpreter's own."""
    runs = iter([
        {"wall_ns": 3e9, "cpu_ns": 2e9, "peak_rss": 90e6, "base_rss": 40e6, "totals": {7: 5.0}, "decoder": "json"},
        {"wall_ns": 1e9, "cpu_ns": 1e9, "peak_rss": 80e6, "base_rss": 40e6, "totals": {7: 5.0}, "decoder": "json"},
        {"wall_ns": 2e9, "cpu_ns": 4e9, "peak_rss": 70e6, "base_rss": 41e6, "totals": {7: 5.0}, "decoder": "json"},
    ])
    monkeypatch.setattr(bench, "_run_worker", lambda *a, **k: next(runs))
    (row,) = measure_file(FILES[1], "t", timeout=1, repeats=3, jobs=(1,), hta=False)
    json_mb = len(gzip.decompress(FILES[1].read_bytes())) / 1e6
    assert row["median_ns"] == 2e9 and row["cpu_ns"] == 2e9
    assert row["mb_per_s"] == json_mb / 2.0 and row["mb_per_cpu_s"] == json_mb / 2.0
    assert row["peak_rss_bytes"] == 90e6 and row["analysis_rss_bytes"] == 90e6 - 41e6
    assert row["rss_over_json"] == (90e6 - 41e6) / (json_mb * 1e6)
    assert row["idle_total_us"] == 5.0 and row["decoder"] == "json"
