"""``labkit analyze PATH... [--vs OTHER] [--json OUT] [--html OUT]``: the trace analyzer's command line.

One trace: a short summary (per-stream idle split by cause, host call sites starving the GPU,
copies), optionally the JSON result and a single offline HTML report. Several traces (or a
folder of them): one analysis per trace on ``--jobs`` local processes or a Dask cluster
(``--dask``), then a combined view across ranks (``labkit.trace.analysis.many``).

Output paths are checked before any work (a folder, a missing parent folder, two outputs to
one path or an output that is an input are errors), and outputs are written only when every
one of them was built: on bad input nothing is left behind, one line goes to stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.outputs import check_outputs, write_all


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="labkit analyze",
                                description="Analyse PyTorch/vLLM profiler traces: idle bubbles, causes, copies.")
    p.add_argument("trace", nargs="+", metavar="PATH",
                   help="Kineto trace (.json or .json.gz), e.g. vLLM's *.pt.trace.json.gz, or a folder "
                        "(every *.json / *.json.gz below it); several traces get a combined view")
    p.add_argument("--vs", metavar="OTHER", help="a second trace to compare against (TRACE = before, OTHER = after)")
    p.add_argument("--json", metavar="OUT", help="write the analysis as JSON to OUT")
    p.add_argument("--html", metavar="OUT", help="write a single offline HTML report to OUT (one trace; needs plotly)")
    p.add_argument("--top", type=int, default=10, help="how many call sites / bubbles to list (default 10)")
    p.add_argument("--steps", default=None, metavar="REGEX",
                   help="regex naming step spans (default: ProfilerStep#N, else vLLM's execute_context_* / "
                        "execute_model, found automatically)")
    p.add_argument("--kernel-wait-us", type=float, default=None,
                   help="gaps shorter than this with work queued count as kernel wait (default 30, like HTA)")
    p.add_argument("--skip-malformed", action="store_true",
                   help="skip malformed events even when they are more than 0.1%% of a trace")
    p.add_argument("--jobs", type=int, default=None, help="local processes for several traces (default: core count)")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="run the per-trace work on an existing Dask distributed scheduler (needs labkit[scale])")
    return p


def _options(args) -> dict:
    kw: dict = {}
    if args.steps is not None:
        kw["step_pattern"] = args.steps
    if args.kernel_wait_us is not None:
        if not math.isfinite(args.kernel_wait_us) or args.kernel_wait_us < 0:
            raise UsageError("--kernel-wait-us must be a finite number >= 0")
        kw["kernel_wait_us"] = args.kernel_wait_us
    if args.skip_malformed:
        kw["skip_malformed"] = True
    if args.steps is not None:
        import re

        try:
            re.compile(args.steps)
        except re.error as exc:
            raise UsageError(f"bad step pattern {args.steps!r}: {exc}") from None
    return kw


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.top < 1:
        raise UsageError("--top must be >= 1")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be >= 1")
    kw = _options(args)
    from labkit.trace.analysis.many import expand_paths

    traces = expand_paths(args.trace)
    if args.vs is not None and not Path(args.vs).is_file():
        raise UsageError(f"no such trace file: {args.vs}")
    several = len(traces) > 1
    if several and (args.vs or args.html):
        raise UsageError("--vs and --html take one trace; give a single PATH")
    outs = check_outputs({"--json": args.json, "--html": args.html},
                         traces + ([Path(args.vs)] if args.vs else []))
    if args.html:
        try:
            import plotly  # noqa: F401
        except ImportError:
            raise UsageError("--html needs plotly, which is not installed (pip install 'labkit[notebook]')") from None
    if several or args.dask:
        return _main_many(args, traces, kw, outs)
    return _main_one(args, traces[0], kw, outs)


def _main_one(args, trace: Path, kw: dict, outs: dict[str, Path]) -> int:
    from labkit.trace.analysis.analyze import analyze_trace

    before = analyze_trace(trace, cache=False, **kw)
    diff = None
    if args.vs:
        from labkit.trace.analysis.diff import diff_analyses

        diff = diff_analyses(before, analyze_trace(args.vs, cache=False, **kw))
    # Build every output first, then write: a failure leaves no partial file behind.
    texts: dict[Path, str] = {}
    if "--json" in outs:
        payload = before.to_json(top=args.top)
        if diff is not None:
            payload = {"before": payload, "after": diff.after.to_json(top=args.top), "diff": diff.to_json(top=args.top)}
        texts[outs["--json"]] = json.dumps(payload, indent=1, allow_nan=False) + "\n"
    if "--html" in outs:
        from labkit.trace.analysis.html import render_report

        texts[outs["--html"]] = render_report(before, other=diff.after if diff is not None else None, top=args.top)
    for line in before.summary_lines(top=min(args.top, 10)):
        print(line)
    if diff is not None:
        print()
        for line in diff.after.summary_lines(top=min(args.top, 10)):
            print(line)
        print()
        for line in diff.summary_lines(top=min(args.top, 10)):
            print(line)
    write_all(texts)
    for path in texts:
        print(f"wrote {path}")
    return 0


def _main_many(args, traces: list[Path], kw: dict, outs: dict[str, Path]) -> int:
    from labkit.trace.analysis.many import analyze_many, combine, combined_lines

    records = analyze_many(traces, options=kw, top=args.top, jobs=args.jobs, dask_address=args.dask)
    comb = combine(records)
    texts: dict[Path, str] = {}
    if "--json" in outs:
        payload = ({"traces": [{"trace": r["trace"], **r["json"]} for r in records], "combined": comb}
                   if len(records) > 1 else records[0]["json"])
        texts[outs["--json"]] = json.dumps(payload, indent=1, allow_nan=False) + "\n"
    for r in records:
        for line in r["lines"]:
            print(line)
        print()
    if len(records) > 1:
        for line in combined_lines(comb):
            print(line)
    write_all(texts)
    for path in texts:
        print(f"wrote {path}")
    return 0
