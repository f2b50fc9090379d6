"""``labkit bench trace``'s rows: per trace file and tool, MB/s of JSON text and peak memory."""

from __future__ import annotations

import gzip
import threading
import time
from pathlib import Path

import pytest

import labkit.trace.analysis.bench_trace as bench
from labkit.trace.analysis.bench_trace import decompressed_bytes, measure_file

DATA = Path(__file__).resolve().parent / "data"
FILES = [DATA / "hta-triton-example-a100.pt.trace.json.gz", DATA / "nvllm-gb10-one-step.trimmed.pt.trace.json.gz"]


def test_per_trace_rows_measure_each_file():
    t0 = time.perf_counter_ns()
    both = [r for f in FILES for r in measure_file(f, f.name, timeout=300, jobs=(1,), hta=False)]
    elapsed_ns = time.perf_counter_ns() - t0
    # per file: the bare decode of its JSON text first, then labkit, each a ratio of the bare decode's MB/s
    assert [(r["trace"], r["variant"]) for r in both] == [(f.name, v) for f in FILES for v in ("bare-decode", "labkit")]
    assert all(r["vs_bare_decode"] == r["mb_per_s"] / b["mb_per_s"] for b, r in zip(both[::2], both[1::2]))
    assert all(b["vs_bare_decode"] == 1.0 and b["idle_total_us"] is None for b in both[::2])
    rows = both[1::2]
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
    (row,) = measure_file(FILES[1], "t", timeout=1, repeats=3, jobs=(1,), hta=False, bare=False)
    json_mb = len(gzip.decompress(FILES[1].read_bytes())) / 1e6
    assert row["median_ns"] == 2e9 and row["cpu_ns"] == 2e9
    assert row["mb_per_s"] == json_mb / 2.0 and row["mb_per_cpu_s"] == json_mb / 2.0
    assert row["peak_rss_bytes"] == 90e6 and row["analysis_rss_bytes"] == 90e6 - 41e6
    assert row["rss_over_json"] == (90e6 - 41e6) / (json_mb * 1e6)
    assert row["idle_total_us"] == 5.0 and row["decoder"] == "json"
    assert row["cpu_s_per_mb"] == 2.0 / json_mb and row["vs_bare_decode"] is None


def test_ratios_to_the_bare_decode_and_to_jobs_1(monkeypatch):
    """Planted runs: the bare decode at 1 s, labkit at --jobs 1 in 4 s (3 s of CPU), at --jobs 2 in 2.5 s
    (3.3 s of CPU, its worker's included) and two --jobs 1 runs at once in 5 s each (3.15 s of CPU each, on
    threads beside the main one): each row's MB/s over the bare decode's, CPU per MB over --jobs 1's and,
    for --jobs 2, over the two at once'."""
    planted = {"bare-decode": (1e9, 1e9), 1: (4e9, 3e9), 2: (2.5e9, 3.3e9), "twice": (5e9, 3.15e9)}

    def worker(kind, path, timeout, decoder="auto", jobs=1):
        at_once = threading.current_thread() is not threading.main_thread()
        wall, cpu = planted[kind if kind == "bare-decode" else "twice" if at_once else jobs]
        return {"wall_ns": wall, "cpu_ns": cpu, "peak_rss": 90e6, "base_rss": 40e6,
                "totals": None if kind == "bare-decode" else {"7": 5.0}}

    monkeypatch.setattr(bench, "_run_worker", worker)
    bare, one, two, twice = measure_file(FILES[1], "t", timeout=1, jobs=(1, 2), hta=False)
    assert [r["variant"] for r in (bare, one, two, twice)] == ["bare-decode", "labkit", "labkit-jobs2",
                                                                "labkit-two-at-once"]
    assert bare["vs_bare_decode"] == 1.0 and one["vs_bare_decode"] == 0.25 and two["vs_bare_decode"] == 0.4
    assert two["speedup_vs_jobs1"] == 1.6 and two["cpu_vs_jobs1"] == pytest.approx(1.1)
    assert two["cpu_s_per_mb"] == pytest.approx(1.1 * one["cpu_s_per_mb"])
    assert twice["cpu_vs_jobs1"] == pytest.approx(1.05) and twice["jobs"] == 1
    assert two["cpu_vs_two_at_once"] == pytest.approx(3.3 / 3.15) and "cpu_vs_two_at_once" not in twice
    from labkit.bench import format_table

    lines = str(format_table([{**r, "others_frac": 0.25} for r in (bare, one, two)], columns=bench.TRACE.columns))
    lines = lines.splitlines()
    assert "others frac (%)" in lines[0] and lines[3].split()[-1] == "25"
    assert "0.25x" in lines[2] and "1.6x" in lines[3] and "1.1x" in lines[3]


def test_bare_decode_and_hta_left_out_where_their_memory_does_not_fit(monkeypatch):
    monkeypatch.setattr(bench, "_mem_available", lambda: 1000)  # bytes: nothing fits
    monkeypatch.setattr(bench, "_run_worker", lambda kind, *a, **k: {"wall_ns": 1e9, "cpu_ns": 1e9, "peak_rss": 9e7,
                                                                     "base_rss": 4e7, "totals": {"7": 1.0}})
    not_run: list = []
    rows = measure_file(FILES[0], "t", timeout=1, jobs=(1,), not_run=not_run)
    assert [r["variant"] for r in rows] == ["labkit"] and rows[0]["vs_bare_decode"] is None
    assert [line.split(" on ")[0] for line in not_run] == ["bare-decode", "hta"]


def test_jobs_settings_alternate_run_by_run(monkeypatch):
    """Three repeats at --jobs 1 and 2 run 1, 2, (1 and 1 at once), 1, 2, ..., so a machine that slows down
    mid-run slows each alike."""
    order = []

    def worker(kind, path, timeout, decoder="auto", jobs=1):
        order.append(jobs)
        return {"wall_ns": 1e9, "cpu_ns": 1e9, "peak_rss": 90e6, "base_rss": 40e6, "totals": {"7": 5.0}}

    monkeypatch.setattr(bench, "_run_worker", worker)
    measure_file(FILES[1], "t", timeout=1, repeats=3, jobs=(1, 2), hta=False, bare=False)
    assert order == [1, 2, 1, 1] * 3
