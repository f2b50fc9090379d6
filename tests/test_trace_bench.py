"""``labkit bench trace --traces``: one row per real trace with MB/s of JSON text and peak memory."""

from __future__ import annotations

import gzip
from pathlib import Path

from labkit.trace.analysis.bench import decompressed_bytes, per_trace_rows

DATA = Path(__file__).resolve().parent / "data"


def test_per_trace_rows_measure_each_file():
    files = [DATA / "hta-triton-example-a100.pt.trace.json.gz", DATA / "nvllm-gb10-one-step.trimmed.pt.trace.json.gz"]
    rows = per_trace_rows(files, timeout=300, hta=False)
    assert [r["trace"] for r in rows] == [f.name for f in files] and {r["variant"] for r in rows} == {"labkit-file"}
    for f, r in zip(files, rows):
        assert "error" not in r, r
        assert r["json_bytes"] == len(gzip.decompress(f.read_bytes())) == decompressed_bytes(f)
        assert r["peak_rss_bytes"] > r["analysis_rss_bytes"] > 0
        assert r["mb_per_s"] == r["json_bytes"] / 1e6 / (r["median_ns"] / 1e9)
    # the bigger trace needs more memory than the tiny one (peak of a fresh process per file)
    assert rows[1]["analysis_rss_bytes"] > rows[0]["analysis_rss_bytes"]
