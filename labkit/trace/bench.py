"""``labkit bench trace``: load and analyse a big trace, time and peak memory, side by side with HTA.

A trace of at least ``--size-mb`` (default 100) MB is built in a temp folder by repeating the
steps of a real trace (every copy shifted in time past the previous one, with correlation,
flow and external ids and ``ProfilerStep`` numbers offset so copies stay distinct). Each tool
then runs in a fresh subprocess: the lab's ``analyze_trace`` (streaming loader + full analysis)
and HTA's ``TraceAnalysis(...).get_idle_time_breakdown()``. Wall time and peak resident memory
(``ru_maxrss`` of the child, minus the same interpreter's footprint after imports) are recorded
with the file size, plus both tools' per-stream idle totals so they can be checked against each
other. The row of the lab's loader names the batch decoder it used (``msgspec`` when installed,
else ``orjson``/``json``; ``--decoder json`` forces the stdlib path). Result ``trace_bench``; source ``measured-cpu`` (trace analysis runs on the host).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labkit.errors import UsageError

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BASES = [
    REPO_ROOT.parent / "shared" / "traces" / "nvllm-vllm-qwen3.5-27b-nvfp4-flashinfer-gb10-rank0.pt.trace.json.gz",
    REPO_ROOT.parent / "shared" / "traces" / "hta-trace-diff-control-a100-rank3.pt.trace.json.gz",
    REPO_ROOT / "tests" / "data" / "tracelens-h100-bert-small-inference.pt.trace.json.gz",
]
_STEP = re.compile(r"^(ProfilerStep#)(\d+)$")


def build_big_trace(base: Path, out: Path, size_mb: float) -> dict:
    """Write ``out`` (plain JSON) by repeating ``base``'s events, time-shifted, until it has ``size_mb`` MB."""
    with gzip.open(base, "rt", encoding="utf-8") if base.suffix == ".gz" else open(base, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    xs = [e for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    t_min = min(e["ts"] for e in xs)
    t_max = max(e["ts"] + (e.get("dur") or 0) for e in xs if isinstance(e.get("dur") or 0, (int, float)))
    shift = (t_max - t_min) * 1.01 + 100
    ids = [e.get("args", {}).get(k) for e in xs if isinstance(e.get("args"), dict) for k in ("correlation", "External id")]
    ids += [e.get("id") for e in xs]
    id_off = max([i for i in ids if isinstance(i, int)] + [0]) + 1
    target = int(size_mb * 1e6)
    copies = 0
    with open(out, "w", encoding="utf-8") as f:
        head = json.dumps(doc)[:-1]
        f.write(head + (", " if doc else "") + '"traceEvents": [\n')
        first = True
        while f.tell() < target or copies == 0:
            for e in events:
                if not isinstance(e, dict):
                    continue
                e = dict(e)
                if copies and isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
                    e["ts"] = e["ts"] + copies * shift
                if copies and isinstance(e.get("id"), int):
                    e["id"] = e["id"] + copies * id_off
                args = e.get("args")
                if copies and isinstance(args, dict):
                    args = dict(args)
                    for k in ("correlation", "External id"):
                        if isinstance(args.get(k), int) and args[k] >= 0:
                            args[k] = args[k] + copies * id_off
                    e["args"] = args
                m = _STEP.match(str(e.get("name", "")))
                if copies and m:
                    e["name"] = f"{m.group(1)}{int(m.group(2)) + copies * 100000}"
                if copies and e.get("ph") == "M":
                    continue
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
            copies += 1
        f.write("\n]}\n")
        size = f.tell()
    return {"copies": copies, "file_bytes": size, "base": base.name}


_WORKER = r"""
import json, resource, sys, time, logging
kind, path, want_decoder = sys.argv[1], sys.argv[2], sys.argv[3]
logging.disable(logging.WARNING)
import numpy, pandas
if kind == "hta":
    import hta.trace_analysis as hta_ta
else:
    import labkit.trace.analyze as lab
    import labkit.trace.reader as lab_reader
    if want_decoder != "auto":
        lab_reader.DECODER = want_decoder
def rss_now():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
base_rss = rss_now()
if kind == "baseline":
    print(json.dumps({"base_rss": base_rss})); sys.exit(0)
t0 = time.perf_counter_ns()
decoder = None
if kind == "hta":
    import os, shutil
    ta = hta_ta.TraceAnalysis(trace_dir=os.path.dirname(path))
    rank = ta.t.get_ranks()[0]
    df, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
    totals = {str(k): float(v) for k, v in df.groupby("stream")["idle_time"].sum().items()}
else:
    an = lab.analyze_trace(path)
    decoder = lab_reader.DECODER
    df = an.hta_compatible
    totals = {str(k): float(v) for k, v in df.groupby("stream")["idle_time"].sum().items()}
t1 = time.perf_counter_ns()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"wall_ns": t1 - t0, "peak_rss": peak, "base_rss": base_rss, "totals": totals,
                  "decoder": decoder}))
"""


def _run_worker(kind: str, path: Path, timeout: float, decoder: str = "auto") -> dict:
    try:
        p = subprocess.run([sys.executable, "-c", _WORKER, kind, str(path), decoder], capture_output=True, text=True,
                           timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _load_avg() -> float | None:
    """The 1-minute load average of this machine (None where the OS does not tell)."""
    try:
        import os

        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="labkit bench trace",
                                 description="Time and peak memory of the trace analyzer on a >= 100 MB trace, vs HTA.")
    ap.add_argument("--size-mb", type=float, default=100.0, help="size of the synthetic trace (default 100 MB)")
    ap.add_argument("--base", type=Path, default=None, help="real trace whose steps are repeated "
                    "(default: the vLLM GB10 trace of ../shared/traces, else a tests/data trace)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per tool (median reported; default 1)")
    ap.add_argument("--no-hta", action="store_true", help="skip HTA (e.g. where traceinsight is not installed)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per tool run (default 900)")
    ap.add_argument("--decoder", choices=["auto", "json"], default="auto",
                    help="batch decoder of the lab's loader: auto (msgspec when installed) or json (stdlib only)")
    ap.add_argument("--json", type=Path, default=None, help="also write the result JSON here")
    ap.add_argument("--no-save", action="store_true", help="do not save into the results store")
    args = ap.parse_args(argv)
    if args.size_mb <= 0 or args.repeats < 1:
        raise UsageError("--size-mb must be > 0 and --repeats >= 1")
    base = args.base or next((p for p in DEFAULT_BASES if p.is_file()), None)
    if base is None or not base.is_file():
        raise UsageError(f"base trace not found: {base}")
    from labkit.device import measured_source
    from labkit.results import make_result, save_result
    from labkit.timing import summarize

    tools = ["labkit"] + ([] if args.no_hta else ["hta"])
    if "hta" in tools:
        try:
            import hta  # noqa: F401
        except ImportError:
            print("HTA (traceinsight) not installed: measuring labkit only")
            tools = ["labkit"]
    load_start = _load_avg()
    with tempfile.TemporaryDirectory(prefix="labkit-trace-bench-") as tmp:
        big = Path(tmp) / "big.pt.trace.json"
        t = time.perf_counter()
        info = build_big_trace(base, big, args.size_mb)
        print(f"built {big.name}: {info['file_bytes'] / 1e6:.1f} MB from {info['copies']} copies of {base.name} "
              f"({time.perf_counter() - t:.1f} s)")
        rows, totals = [], {}
        for tool in tools:
            runs = [_run_worker(tool, big, args.timeout, args.decoder) for _ in range(args.repeats)]
            bad = [r["error"] for r in runs if "error" in r]
            if bad:
                print(f"{tool}: {bad[0]}")
                rows.append({"variant": tool, "error": bad[0], "file_bytes": info["file_bytes"]})
                continue
            tm = summarize([r["wall_ns"] for r in runs], method="perf_counter_ns (subprocess)")
            peak = max(r["peak_rss"] for r in runs)
            extra = max(peak - max(r["base_rss"] for r in runs), 0)
            totals[tool] = runs[0]["totals"]
            rows.append({"variant": tool, "file_bytes": info["file_bytes"], "copies": info["copies"],
                         "median_ns": tm.median_ns, "p20_ns": tm.p20_ns, "p80_ns": tm.p80_ns,
                         "peak_rss_bytes": peak, "import_rss_bytes": max(r["base_rss"] for r in runs), "analysis_rss_bytes": extra,
                         "rss_over_file": extra / info["file_bytes"], "idle_total_us": sum(runs[0]["totals"].values()),
                         **({"decoder": runs[0]["decoder"]} if runs[0].get("decoder") else {})})
    ok = {r["variant"]: r for r in rows if "median_ns" in r}
    if "labkit" in ok and "hta" in ok:
        ok["labkit"]["speedup_vs_hta"] = ok["hta"]["median_ns"] / ok["labkit"]["median_ns"]
        ref = totals["hta"]
        diffs = [abs(totals["labkit"].get(s, 0.0) - v) / max(abs(v), 1.0) for s, v in ref.items()]
        ok["labkit"]["idle_max_rel_diff_vs_hta"] = max(diffs) if diffs else 0.0
    print(f"decoder: {ok.get('labkit', {}).get('decoder') or 'n/a'}; load average (1 min): {load_start} at start, {_load_avg()} at end")
    print(f"{'tool':<8} {'wall_s':>8} {'peak_rss_MB':>12} {'analysis_MB':>12} {'x file':>7} {'speedup':>8}")
    for r in rows:
        if "median_ns" not in r:
            continue
        sp = r.get("speedup_vs_hta")
        print(f"{r['variant']:<8} {r['median_ns'] / 1e9:>8.2f} {r['peak_rss_bytes'] / 1e6:>12.1f} "
              f"{r['analysis_rss_bytes'] / 1e6:>12.1f} {r['rss_over_file']:>7.2f} {'' if sp is None else f'{sp:.1f}x':>8}")
    params = {"size_mb": args.size_mb, "base": base.name, "repeats": args.repeats, "tools": tools,
              "decoder": ok.get("labkit", {}).get("decoder"), "load_avg_1m_start": load_start,
              "load_avg_1m_end": _load_avg()}
    result = make_result("trace_bench", rows, source=measured_source("cpu"), params=params)
    if not args.no_save:
        print(f"saved {save_result(result)}")
    if args.json:
        from labkit.trace.cli import write_atomic

        write_atomic(args.json, json.dumps(result.to_json(), indent=1) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
