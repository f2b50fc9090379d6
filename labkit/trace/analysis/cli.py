"""``labkit analyze PATH... [--vs OTHER] [--json OUT] [--html OUT]``: the trace analyzer's command line.

``add_cli_args(parser)`` declares the options and ``main(args)`` runs them: one trace (a summary, the
JSON, an offline page), or several traces / a profile folder (one analysis per trace on ``--jobs``
processes or ``--dask``, then the combined view). Outputs are checked before any work and written
all or none; bad input is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.analysis.analyze import analyze_trace
from labkit.trace.analysis.diff import diff_analyses
from labkit.trace.analysis.many import analyze_many, combine, combined_lines, expand_paths
from labkit.trace.outputs import check_outputs, json_text, render_report, write_all


def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = "Analyse PyTorch/vLLM profiler traces: idle bubbles, causes, copies."
    parser.add_argument("trace", nargs="+", metavar="PATH",
                        help="Kineto trace (.json or .json.gz), e.g. vLLM's *.pt.trace.json.gz, or a folder "
                             "(every *.json / *.json.gz below it); several traces get a combined view")
    parser.add_argument("--vs", metavar="OTHER", help="a second trace to compare against (TRACE = before, OTHER = after)")
    parser.add_argument("--json", metavar="OUT", help="write the analysis as JSON to OUT")
    parser.add_argument("--html", metavar="OUT",
                        help="write a single offline HTML report to OUT (one trace; needs plotly)")
    parser.add_argument("--top", type=int, default=10, help="how many call sites / bubbles to list (default 10)")
    parser.add_argument("--steps", default=None, metavar="REGEX",
                        help="regex naming step spans (default: ProfilerStep#N, else vLLM's execute_context_* / "
                             "execute_model, found automatically)")
    parser.add_argument("--kernel-wait-us", type=float, default=None,
                        help="gaps shorter than this with work queued count as kernel wait (default 30, like HTA)")
    parser.add_argument("--skip-malformed", action="store_true",
                        help="skip malformed events even when they are more than 0.1%% of a trace")
    parser.add_argument("--jobs", type=int, default=None,
                        help="local processes: one per trace for several traces, byte ranges of one large "
                             "trace otherwise (default: core count)")
    parser.add_argument("--dask", metavar="ADDRESS", default=None,
                        help="run the per-trace work on an existing Dask distributed scheduler (needs labkit[scale])")
    return parser


def _options(args) -> dict:
    kw: dict = {"step_pattern": args.steps} if args.steps is not None else {}
    if args.kernel_wait_us is not None:
        if not math.isfinite(args.kernel_wait_us) or args.kernel_wait_us < 0:
            raise UsageError("--kernel-wait-us must be a finite number >= 0")
        kw["kernel_wait_us"] = args.kernel_wait_us
    if args.skip_malformed:
        kw["skip_malformed"] = True
    if args.steps is not None:
        try:
            re.compile(args.steps)
        except re.error as exc:
            raise UsageError(f"bad step pattern {args.steps!r}: {exc}") from None
    return kw


def main(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise UsageError("--top must be >= 1")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be >= 1")
    kw = _options(args)
    traces = expand_paths(args.trace)
    if args.vs is not None and not Path(args.vs).is_file():
        raise UsageError(f"no such trace file: {args.vs}")
    several = len(traces) > 1
    if several and (args.vs or args.html):
        raise UsageError("--vs and --html take one trace; give a single PATH")
    outs = check_outputs({"--json": args.json, "--html": args.html}, traces + ([Path(args.vs)] if args.vs else []))
    if args.html and importlib.util.find_spec("plotly") is None:
        raise UsageError("--html needs plotly, which is not installed (pip install 'labkit[notebook]')")
    jobs = args.jobs or os.cpu_count() or 1
    if several or args.dask:
        return _main_many(args, traces, kw, outs, jobs)
    return _main_one(args, traces[0], kw, outs, jobs)


def _main_one(args, trace: Path, kw: dict, outs: dict[str, Path], jobs: int) -> int:
    before = analyze_trace(trace, cache=False, jobs=jobs, **kw)
    diff = diff_analyses(before, analyze_trace(args.vs, cache=False, jobs=jobs, **kw)) if args.vs else None
    texts: dict[Path, str] = {}  # every output built first, then written: a failure leaves no partial file
    if "--json" in outs:
        payload = before.to_json(top=args.top)
        if diff is not None:
            payload = {"before": payload, "after": diff.after.to_json(top=args.top), "diff": diff.to_json(top=args.top)}
        texts[outs["--json"]] = json_text(payload)
    if "--html" in outs:
        texts[outs["--html"]] = render_report(before, other=diff.after if diff is not None else None, top=args.top)
    lines = before.summary_lines(top=min(args.top, 10))
    if diff is not None:
        lines += ["", *diff.after.summary_lines(top=min(args.top, 10)), "", *diff.summary_lines(top=min(args.top, 10))]
    return _finish(lines, texts)


def _main_many(args, traces: list[Path], kw: dict, outs: dict[str, Path], jobs: int) -> int:
    records = analyze_many(traces, options=kw, top=args.top, jobs=jobs, dask_address=args.dask)
    comb = combine(records)
    texts: dict[Path, str] = {}
    if "--json" in outs:
        payload = ({"traces": [{"trace": r["trace"], **r["json"]} for r in records], "combined": comb}
                   if len(records) > 1 else records[0]["json"])
        texts[outs["--json"]] = json_text(payload)
    lines = [line for r in records for line in (*r["lines"], "")]
    if len(records) > 1:
        lines += combined_lines(comb)
    return _finish(lines, texts)


def _finish(lines: list[str], texts: dict[Path, str]) -> int:
    for line in lines:
        print(line)
    write_all(texts)
    for path in texts:
        print(f"wrote {path}")
    return 0
