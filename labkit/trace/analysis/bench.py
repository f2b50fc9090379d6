"""``labkit bench trace``: load and analyse a big trace, time and peak memory, side by side with HTA.

A trace of at least ``--size-mb`` MB (``--size full``: 100, quick: 20) is built in a temp folder by repeating the
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

REPO_ROOT = Path(__file__).resolve().parents[3]
#: the real trace whose steps are repeated, by default: one step of a vLLM serving trace (a fixture)
DEFAULT_BASES = [
    REPO_ROOT / "tests" / "data" / "nvllm-gb10-one-step.trimmed.pt.trace.json.gz",
    REPO_ROOT / "tests" / "data" / "tracelens-h100-bert-small-inference.pt.trace.json.gz",
]
#: synthetic trace size in MB per run size
TRACE_MB = {"quick": 20.0, "full": 100.0}
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
    import labkit.trace.analysis.analyze as lab
    import labkit.trace.read.reader as lab_reader
    if want_decoder != "auto":
        lab_reader.DECODER = want_decoder
def status_bytes(key):  # VmRSS now, VmHWM peak: this program's own map (ru_maxrss can carry the parent's)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
base_rss = status_bytes("VmRSS")
if kind == "baseline":
    print(json.dumps({"base_rss": base_rss})); sys.exit(0)
t0 = time.perf_counter_ns()
c0 = time.process_time_ns()
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
cpu_ns = time.process_time_ns() - c0
peak = status_bytes("VmHWM")
print(json.dumps({"wall_ns": t1 - t0, "cpu_ns": cpu_ns, "peak_rss": peak, "base_rss": base_rss, "totals": totals,
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


def decompressed_bytes(path: Path) -> int:
    """Size of the JSON text of a trace file (gunzipped where it is gzip'ed), in bytes."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            n += len(chunk)
    return n


def _tool_row(tool: str, runs: list[dict], json_bytes: int, extra: dict) -> dict:
    """One result row from a tool's worker runs: wall and CPU time, MB/s of JSON text, peak memory."""
    from labkit.timing import summarize

    tm = summarize([r["wall_ns"] for r in runs], method="perf_counter_ns (subprocess)")
    peak = max(r["peak_rss"] for r in runs)
    base = max(r["base_rss"] for r in runs)
    cpu = sorted(r.get("cpu_ns", 0) for r in runs)[len(runs) // 2]
    return {"variant": tool, **extra, "json_bytes": json_bytes, "median_ns": tm.median_ns, "p20_ns": tm.p20_ns,
            "p80_ns": tm.p80_ns, "cpu_ns": cpu, "mb_per_s": json_bytes / 1e6 / (tm.median_ns / 1e9),
            "mb_per_cpu_s": json_bytes / 1e6 / (cpu / 1e9) if cpu else None,
            "peak_rss_bytes": peak, "import_rss_bytes": base, "analysis_rss_bytes": max(peak - base, 0),
            "rss_over_json": max(peak - base, 0) / json_bytes, "idle_total_us": sum(runs[0]["totals"].values()),
            **({"decoder": runs[0]["decoder"]} if runs[0].get("decoder") else {})}


def per_trace_rows(files: list[Path], *, timeout: float, decoder: str = "auto", repeats: int = 1,
                   hta: bool = True) -> list[dict]:
    """One row per real trace file (variant ``labkit-file``): time, MB/s and peak memory of a fresh
    process analysing it; plus HTA on the largest file (``hta-file``, the file alone in a temp folder)."""
    import shutil

    rows = []
    sizes = {f: decompressed_bytes(f) for f in files}
    for f in files:
        runs = [_run_worker("labkit", f, timeout, decoder) for _ in range(repeats)]
        bad = [r["error"] for r in runs if "error" in r]
        extra = {"trace": f.name, "file_bytes": f.stat().st_size}
        rows.append({"variant": "labkit-file", **extra, "error": bad[0]} if bad
                    else _tool_row("labkit-file", runs, sizes[f], extra))
    if hta and files:
        big = max(files, key=lambda f: sizes[f])
        with tempfile.TemporaryDirectory(prefix="labkit-trace-bench-hta-") as tmp:
            copy = Path(tmp) / big.name
            shutil.copyfile(big, copy)
            runs = [_run_worker("hta", copy, timeout) for _ in range(repeats)]
        bad = [r["error"] for r in runs if "error" in r]
        extra = {"trace": big.name, "file_bytes": big.stat().st_size}
        rows.append({"variant": "hta-file", **extra, "error": bad[0]} if bad else _tool_row("hta-file", runs, sizes[big], extra))
    return rows


def _load_avg() -> float | None:
    """The 1-minute load average of this machine (None where the OS does not tell)."""
    try:
        import os

        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    from labkit.cli import add_run_options, emit_result, resolve_run_options

    ap = argparse.ArgumentParser(prog="labkit bench trace",
                                 description="Time and peak memory of the trace analyzer on a big trace "
                                             "(full: >= 100 MB), vs HTA.")
    ap.add_argument("--size-mb", type=float, default=None,
                    help=f"size of the synthetic trace (default by --size: quick {TRACE_MB['quick']:.0f} MB, "
                         f"full {TRACE_MB['full']:.0f} MB)")
    ap.add_argument("--base", type=Path, default=None, help="real trace whose steps are repeated "
                    "(default: tests/data's one step of a vLLM GB10 serving trace)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per tool (median reported; default 1)")
    ap.add_argument("--no-hta", action="store_true", help="skip HTA (e.g. where traceinsight is not installed)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per tool run (default 900)")
    ap.add_argument("--traces", nargs="+", type=Path, default=None, metavar="PATH",
                    help="also time each real trace file (or every trace below a folder) on its own: "
                         "MB/s and peak memory per trace, HTA on the largest")
    ap.add_argument("--decoder", choices=["auto", "json"], default="auto",
                    help="batch decoder of the lab's loader: auto (msgspec when installed) or json (stdlib only)")
    add_run_options(ap, json_help="also write the result JSON to OUT",
                    size_help="quick (default; saved as trace_bench_quick) or full (the recorded 100 MB run)")
    args = ap.parse_args(argv)
    size = resolve_run_options(args, ap.prog)
    if args.size_mb is None:
        args.size_mb = TRACE_MB[size]
    if args.size_mb <= 0 or args.repeats < 1:
        raise UsageError("--size-mb must be > 0 and --repeats >= 1")
    base = args.base or next((p for p in DEFAULT_BASES if p.is_file()), None)
    if base is None or not base.is_file():
        raise UsageError(f"base trace not found: {base}")
    from labkit.device import measured_source
    from labkit.results import make_result, sized_name
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
            totals[tool] = runs[0]["totals"]
            row = _tool_row(tool, runs, info["file_bytes"], {"file_bytes": info["file_bytes"], "copies": info["copies"]})
            rows.append({**row, "rss_over_file": row["rss_over_json"]})
        if args.traces:
            from labkit.trace.analysis.many import expand_paths

            rows += per_trace_rows(expand_paths([str(p) for p in args.traces]), timeout=args.timeout,
                                   decoder=args.decoder, repeats=args.repeats, hta="hta" in tools)
    ok = {r["variant"]: r for r in rows if "median_ns" in r}
    if "labkit" in ok and "hta" in ok:
        ok["labkit"]["speedup_vs_hta"] = ok["hta"]["median_ns"] / ok["labkit"]["median_ns"]
        ref = totals["hta"]
        diffs = [abs(totals["labkit"].get(s, 0.0) - v) / max(abs(v), 1.0) for s, v in ref.items()]
        ok["labkit"]["idle_max_rel_diff_vs_hta"] = max(diffs) if diffs else 0.0
    print(f"decoder: {ok.get('labkit', {}).get('decoder') or 'n/a'}; load average (1 min): {load_start} at start, {_load_avg()} at end")
    print(f"{'tool':<12} {'wall_s':>8} {'MB/s':>7} {'MB/cpu_s':>8} {'peak_rss_MB':>12} {'analysis_MB':>12} "
          f"{'x json':>7} {'speedup':>8}  trace")
    for r in rows:
        if "median_ns" not in r:
            continue
        sp = r.get("speedup_vs_hta")
        print(f"{r['variant']:<12} {r['median_ns'] / 1e9:>8.2f} {r['mb_per_s']:>7.1f} {r['mb_per_cpu_s'] or 0:>8.1f} "
              f"{r['peak_rss_bytes'] / 1e6:>12.1f} {r['analysis_rss_bytes'] / 1e6:>12.1f} {r['rss_over_json']:>7.2f} "
              f"{'' if sp is None else f'{sp:.1f}x':>8}  {r.get('trace', '(synthetic)')}")
    params = {"size": size, "size_mb": args.size_mb, "base": base.name, "repeats": args.repeats, "tools": tools,
              "traces": [str(p) for p in args.traces] if args.traces else None,
              "decoder": ok.get("labkit", {}).get("decoder"), "load_avg_1m_start": load_start,
              "load_avg_1m_end": _load_avg()}
    result = make_result(sized_name("trace_bench", size), rows, source=measured_source("cpu"), params=params,
                         size=size)
    emit_result(result, args)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
