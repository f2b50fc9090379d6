"""Trim one of vLLM's CPU profiler traces into the test fixture ``tests/data/vllm-cpu-*.trimmed.pt.trace.json.gz``.

    python tests/vllm_cpu_fixture.py SRC DST [--first K] [--steps N]

Keeps the file's top-level fields (``host_name`` replaced by ``"redacted"``), every metadata
event (``ph == "M"``) and every event that starts inside the window from the start of the
``K``-th model-runner step (``execute_context_*`` annotations, counted from 0) to the start of
the step ``N`` later (or the end of the trace), so each kept step keeps the scheduling and
output processing that follow it. Event contents are never changed. The source trace and the
command that made it are recorded in ``tests/data/README.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys


def trim(src: str, dst: str, *, first: int, steps: int) -> tuple[int, int]:
    with gzip.open(src, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    starts = sorted(e["ts"] for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("execute_context_"))
    if len(starts) <= first:
        raise SystemExit(f"{src}: only {len(starts)} steps, cannot start at step {first}")
    lo = starts[first]
    hi = starts[first + steps] if first + steps < len(starts) else float("inf")
    kept = [e for e in events if e.get("ph") == "M" or (e.get("ph") == "X" and lo <= e.get("ts", -1) < hi)]
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    if "host_name" in out:
        out["host_name"] = "redacted"
    out["traceEvents"] = kept
    with gzip.open(dst, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(out, f, separators=(",", ":"))
    return len(events), len(kept)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--first", type=int, default=3, help="first step kept (default 3: past the prefill)")
    p.add_argument("--steps", type=int, default=3, help="steps kept (default 3)")
    args = p.parse_args(argv)
    total, kept = trim(args.src, args.dst, first=args.first, steps=args.steps)
    print(f"kept {kept} of {total} events -> {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
