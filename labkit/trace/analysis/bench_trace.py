"""``labkit bench trace``: MB/s of trace JSON and peak memory of ``labkit analyze`` at ``--jobs 1`` and 2, and HTA's.

Result ``trace_bench`` (source ``measured-cpu``); more: docs/analyzer-profile.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from labkit.bench import Bench, add_run_options, report, resolve_run_options
from labkit.device import measured_source
from labkit.errors import UsageError
from labkit.machine_load import describe_load, machine_load
from labkit.results import TRACE_BENCH
from labkit.timing import summarize
from labkit.trace.analysis.host.steps import STEP_NUMBER
from labkit.trace.analysis.many import expand_paths

REPO_ROOT = Path(__file__).resolve().parents[3]
#: the real trace whose steps are repeated, by default: one step of a vLLM serving trace (a fixture)
DEFAULT_BASES = [
    REPO_ROOT / "tests" / "data" / "nvllm-gb10-one-step.trimmed.pt.trace.json.gz",
    REPO_ROOT / "tests" / "data" / "tracelens-h100-bert-small-inference.pt.trace.json.gz",
]
#: the result: the sizes (MB) of the built traces at each size, and its table
TRACE = Bench(TRACE_BENCH, axes={"size_mb": ((20.0,), (100.0, 1000.0))},
              columns=("variant", "trace", "median_ns", "mb_per_s", "vs_bare_decode", "cpu_s_per_mb", "rss_over_json",
                       "speedup_vs_jobs1", "cpu_vs_jobs1", "cpu_vs_two_at_once", "speedup_vs_hta", "others_frac"))
#: peak memory per byte of JSON, to tell where a tool does not fit: HTA's (4.4 recorded) and the bare decode's
#: (the text and every event as Python objects)
RSS_OVER_JSON = {"hta": 5.0, "bare-decode": 5.0}
BARE = "bare-decode"  #: the variant of the bare decode's rows
TWICE = "labkit-two-at-once"  #: the variant of two ``--jobs 1`` runs at once (both cores busy, no work shared)


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
    target, copies = int(size_mb * 1e6), 0
    with open(out, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc)[:-1] + (", " if doc else "") + '"traceEvents": [\n')
        first = True
        while f.tell() < target or copies == 0:
            for e in events:
                if not isinstance(e, dict) or (copies and e.get("ph") == "M"):
                    continue
                e = dict(e)
                if copies and isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + copies * shift
                if copies and isinstance(e.get("id"), int):
                    e["id"] = e["id"] + copies * id_off
                if copies and isinstance(e.get("args"), dict):
                    e["args"] = {k: v + copies * id_off if k in ("correlation", "External id") and isinstance(v, int)
                                 and v >= 0 else v for k, v in e["args"].items()}
                m = STEP_NUMBER.match(str(e.get("name", "")))
                if copies and m:
                    e["name"] = f"{e['name'][:m.start(1)]}{int(m.group(1)) + copies * 100000}{e['name'][m.end(1):]}"
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
            copies += 1
        f.write("\n]}\n")
        size = f.tell()
    return {"copies": copies, "file_bytes": size, "base": base.name}


_WORKER = r"""
import json, resource, sys, time, logging
kind, path, want_decoder, jobs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
logging.disable(logging.WARNING)
import numpy, pandas
if kind == "hta":
    import hta.trace_analysis as hta_ta
elif kind == "bare-decode":
    import gc, gzip
    with open(path, "rb") as f:
        text = f.read()
    text = gzip.decompress(text) if text[:2] == b"\x1f\x8b" else text
    decode, used = json.loads, "json"
    if want_decoder != "json":  # the fastest whole-JSON decoder at hand: msgspec (the dev extra)
        try:
            import msgspec
            decode, used = msgspec.json.decode, "msgspec"
        except ImportError:
            pass
else:
    import labkit.trace.analysis.trace as lab
    import labkit.trace.read.reader as lab_reader
    import labkit.trace.read.streams as lab_streams
    from labkit.trace.read.columns import keep_freed_memory
    allocator = keep_freed_memory()  # as labkit analyze does
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
t0, c0 = time.perf_counter_ns(), time.process_time_ns()
extra = {}
if kind == "bare-decode":  # the text alone, as the analyzer reads it: the garbage collector off
    gc.disable()
    decode(text)
    df = None
    extra = {"decoder": used}
elif kind == "hta":
    import os
    ta = hta_ta.TraceAnalysis(trace_dir=os.path.dirname(path))
    df, _ = ta.get_idle_time_breakdown(ranks=[ta.t.get_ranks()[0]], visualize=False)
else:
    an = lab.Trace(path, jobs=jobs)
    an.to_json()  # every table, as labkit analyze computes them
    df = an.hta_compatible()
    extra = {"decoder": lab_reader.DECODER, "inflate": lab_streams.INFLATE, "parts": an.tables.stats.parts,
             "allocator": allocator}
t1 = time.perf_counter_ns()
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu_ns = time.process_time_ns() - c0 + int((kids.ru_utime + kids.ru_stime) * 1e9)
totals = {str(k): float(v) for k, v in df.groupby("stream")["idle_time"].sum().items()} if df is not None else None
print(json.dumps({"wall_ns": t1 - t0, "cpu_ns": cpu_ns, "peak_rss": status_bytes("VmHWM"), "base_rss": base_rss,
                  "child_peak_rss": kids.ru_maxrss * 1024, "totals": totals, **extra}))
"""


def _run_worker(kind: str, path: Path, timeout: float, decoder: str = "auto", jobs: int = 1) -> dict:
    try:
        p = subprocess.run([sys.executable, "-c", _WORKER, kind, str(path), decoder, str(jobs)], capture_output=True,
                           text=True, timeout=timeout, check=False)
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
    """One result row from a tool's worker runs: wall and CPU time, MB/s of JSON text, peak memory (the
    process's and, with ``--jobs`` > 1, its largest worker's, each less the interpreter's own footprint)."""
    tm = summarize([r["wall_ns"] for r in runs], method="perf_counter_ns (subprocess)")
    workers = max(r.get("parts", 1) for r in runs) - 1
    peak = max(r["peak_rss"] + workers * r.get("child_peak_rss", 0) for r in runs)
    base = max(r["base_rss"] for r in runs)
    analysis = max(peak - base * (1 + workers), 0)
    cpu = sorted(r.get("cpu_ns", 0) for r in runs)[len(runs) // 2]
    totals = runs[0].get("totals")
    return {"variant": tool, **extra, "json_bytes": json_bytes, "median_ns": tm.median_ns, "p20_ns": tm.p20_ns,
            "p80_ns": tm.p80_ns, "cpu_ns": cpu, "mb_per_s": json_bytes / 1e6 / (tm.median_ns / 1e9),
            "mb_per_cpu_s": json_bytes / 1e6 / (cpu / 1e9) if cpu else None,
            "cpu_s_per_mb": cpu / 1e9 / (json_bytes / 1e6), "peak_rss_bytes": peak, "import_rss_bytes": base,
            "analysis_rss_bytes": analysis, "rss_over_json": analysis / json_bytes,
            "idle_total_us": sum(totals.values()) if totals is not None else None,
            **{k: runs[0][k] for k in ("decoder", "inflate", "parts", "allocator") if k in runs[0]}}


def _mem_available() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    return None


def _fits(tool: str, label: str, json_bytes: int, not_run: list) -> bool:
    """Whether ``tool``'s memory for this much JSON fits what the machine has available (else a line in ``not_run``)."""
    avail, need = _mem_available(), json_bytes * RSS_OVER_JSON[tool]
    if avail is not None and need > 0.8 * avail:
        not_run.append(f"{tool} on {label}: needs about {need / 1e9:.1f} GB, {avail / 1e9:.1f} GB available")
        return False
    return True


def measure_file(path: Path, label: str, *, timeout: float, repeats: int = 1, decoder: str = "auto",
                 jobs: tuple = (1, 2), hta: bool = True, bare: bool = True, not_run: list | None = None) -> list[dict]:
    """Rows for one trace file: the bare decode, ``labkit`` at each of ``jobs`` and ``hta``, the bare decode and
    HTA where their memory fits (else a line in ``not_run``); with a ``jobs`` above 1, also ``TWICE``, two
    ``--jobs 1`` runs at once (what two busy cores cost the same work on this machine). Every row has its
    MB/s over the bare decode's (``vs_bare_decode``); each labkit row its speed-up over HTA and its wall
    time and CPU seconds per MB over ``--jobs 1``'s (``speedup_vs_jobs1``, ``cpu_vs_jobs1``), and each
    ``--jobs`` above 1 its CPU seconds per MB over ``TWICE``'s (``cpu_vs_two_at_once``)."""
    not_run = not_run if not_run is not None else []
    json_bytes = decompressed_bytes(path)
    extra = {"trace": label, "file_bytes": path.stat().st_size}
    base_row, lab, totals = None, [], {}
    if bare and _fits(BARE, label, json_bytes, not_run):
        runs = [_run_worker(BARE, path, timeout, decoder) for _ in range(repeats)]
        bad = [r["error"] for r in runs if "error" in r]
        if bad:
            not_run.append(f"{BARE} on {label}: {bad[0]}")
        else:
            base_row = _tool_row(BARE, runs, json_bytes, extra)
    settings = (*jobs, TWICE) if max(jobs) > 1 else jobs  # two --jobs 1 runs at once: both cores busy, no work shared
    by_jobs: dict = {j: [] for j in settings}
    for _ in range(repeats):  # the settings alternate, so a drift of the machine's speed hits each alike
        for j in jobs:
            by_jobs[j].append(_run_worker("labkit", path, timeout, decoder, j))
        if TWICE in settings:
            with ThreadPoolExecutor(2) as pool:
                by_jobs[TWICE] += pool.map(lambda _: _run_worker("labkit", path, timeout, decoder, 1), range(2))
    for j in settings:
        runs = by_jobs[j]
        bad = [r["error"] for r in runs if "error" in r]
        if bad:
            raise UsageError(f"labkit analyze failed on {label}: {bad[0]}")
        lab.append(_tool_row("labkit" if j == 1 else TWICE if j == TWICE else f"labkit-jobs{j}", runs, json_bytes,
                             {**extra, "jobs": 1 if j == TWICE else j}))
        totals[j] = runs[0]["totals"]
    hta_row = None
    if hta and _fits("hta", label, json_bytes, not_run):
        with tempfile.TemporaryDirectory(prefix="labkit-trace-bench-hta-") as tmp:
            alone = Path(tmp) / (path.name if ".pt.trace.json" in path.name else "trace.pt.trace.json")
            try:  # HTA reads every trace of a folder: the file alone in one
                os.link(path, alone)
            except OSError:
                alone.write_bytes(path.read_bytes())
            runs = [_run_worker("hta", alone, timeout) for _ in range(repeats)]
        bad = [r["error"] for r in runs if "error" in r]
        if bad:
            not_run.append(f"hta on {label}: {bad[0]}")
        else:
            hta_row = _tool_row("hta", runs, json_bytes, extra)
            ref = runs[0]["totals"]
            for r, j in zip(lab, jobs):  # not the two at once: each of them shares the machine
                r["speedup_vs_hta"] = hta_row["median_ns"] / r["median_ns"]
                r["idle_max_rel_diff_vs_hta"] = max([abs(totals[j].get(s, 0.0) - v) / max(abs(v), 1.0)
                                                     for s, v in ref.items()] or [0.0])
    for r in lab[1:]:
        r["speedup_vs_jobs1"] = lab[0]["median_ns"] / r["median_ns"]
        r["cpu_vs_jobs1"] = r["cpu_s_per_mb"] / lab[0]["cpu_s_per_mb"] if lab[0]["cpu_s_per_mb"] else None
        if r["variant"] != TWICE:  # the CPU the parts cost beyond what two busy cores cost the same work
            r["cpu_vs_two_at_once"] = r["cpu_s_per_mb"] / lab[-1]["cpu_s_per_mb"] if lab[-1]["cpu_s_per_mb"] else None
    rows = [r for r in [base_row, *lab, hta_row] if r is not None]
    for r in rows:
        r["vs_bare_decode"] = r["mb_per_s"] / base_row["mb_per_s"] if base_row is not None else None
    return rows


def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = ("MB/s of trace JSON and peak memory of the trace analyzer at --jobs 1 and 2 on built "
                          "(full: 100 MB and 1 GB) and real traces, beside HTA.")
    parser.add_argument("--size-mb", type=float, nargs="+", default=None,
                        help="sizes of the built traces (default by --size: quick 20 MB, full 100 MB and 1000 MB)")
    parser.add_argument("--base", type=Path, default=None, help="real trace whose steps are repeated "
                        "(default: tests/data's one step of a vLLM GB10 serving trace)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per tool (median reported; default 1)")
    parser.add_argument("--no-hta", action="store_true", help="skip HTA (e.g. where traceinsight is not installed)")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare decode of each file's JSON")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per tool run (default 900)")
    parser.add_argument("--traces", nargs="+", type=Path, default=None, metavar="PATH",
                        help="also each real trace file (or every trace below a folder), on its own")
    parser.add_argument("--decoder", choices=["auto", "json"], default="auto",
                        help="batch decoder of the lab's loader: auto (the compiled scanner where built, json where "
                        "it declines or is missing) or json (stdlib only)")
    add_run_options(parser, size_help="quick (default; saved as trace_bench_quick) or full (the recorded run)")
    return parser


def main(args: argparse.Namespace) -> int:
    size = resolve_run_options(args)
    sizes = TRACE.at(size, size_mb=args.size_mb)["size_mb"]
    if min(sizes) <= 0 or args.repeats < 1:
        raise UsageError("--size-mb must be > 0 and --repeats >= 1")
    base = args.base or next((p for p in DEFAULT_BASES if p.is_file()), None)
    if base is None or not base.is_file():
        raise UsageError(f"base trace not found: {base}")
    real = expand_paths([str(p) for p in args.traces]) if args.traces else []
    hta = not args.no_hta
    if hta:
        try:
            import hta  # noqa: F401 - optional (labkit[dev]): only probed
        except ImportError:
            print("HTA (traceinsight) not installed: measuring labkit only")
            hta = False
    rows, not_run = [], []

    def measure(path: Path, label: str, **extra) -> None:  # each file's rows with the load while they ran
        with machine_load() as file_load:
            got = measure_file(path, label, timeout=args.timeout, repeats=args.repeats, decoder=args.decoder, hta=hta,
                               bare=not args.no_bare, not_run=not_run)
        rows.extend({**r, **extra, "others_frac": file_load["others_frac"]} for r in got)

    with machine_load() as load, tempfile.TemporaryDirectory(prefix="labkit-trace-bench-") as tmp:
        for mb in sizes:
            big = Path(tmp) / f"built-{mb:g}MB.pt.trace.json"
            t = time.perf_counter()
            info = build_big_trace(base, big, mb)
            print(f"built {big.name}: {info['file_bytes'] / 1e6:.1f} MB from {info['copies']} copies of {base.name} "
                  f"({time.perf_counter() - t:.1f} s)")
            measure(big, big.name, source_trace="built", copies=info["copies"])
            big.unlink()
        for f in real:
            measure(f, f.name, source_trace="real")
    print(describe_load(load))
    for line in not_run:
        print(f"not run: {line}")
    lab = next((r for r in rows if r["variant"] == "labkit"), {})
    params = {"size_mb": list(sizes), "base": base.name, "repeats": args.repeats,
              "tools": ([] if args.no_bare else [BARE]) + ["labkit", "labkit-jobs2", TWICE] + (["hta"] if hta else []),
              "traces": [str(p) for p in args.traces] if args.traces else None, "decoder": lab.get("decoder"),
              "inflate": lab.get("inflate"), "allocator": lab.get("allocator"), "not_run": not_run, "machine_load": load}
    report(args, TRACE.result(rows, size, params=params, source=measured_source("cpu")), TRACE.columns)
    return 0
