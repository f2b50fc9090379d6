"""``labkit analyze TRACE [--vs OTHER] [--json OUT] [--html OUT] [--top N]``: the trace analyzer's command line.

Prints a short summary (per-stream idle split by cause, host call sites starving the GPU,
copies), optionally writes the JSON result and a single offline HTML report. Outputs are
written atomically: on bad input nothing is left behind, one line goes to stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from labkit import fileio
from labkit.errors import UsageError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="labkit analyze",
                                description="Analyse a PyTorch/vLLM profiler trace: idle bubbles, causes, copies.")
    p.add_argument("trace", help="Kineto trace (.json or .json.gz), e.g. vLLM's *.pt.trace.json.gz")
    p.add_argument("--vs", metavar="OTHER", help="a second trace to compare against (TRACE = before, OTHER = after)")
    p.add_argument("--json", metavar="OUT", help="write the analysis as JSON to OUT")
    p.add_argument("--html", metavar="OUT", help="write a single offline HTML report to OUT (needs plotly)")
    p.add_argument("--top", type=int, default=10, help="how many call sites / bubbles to list (default 10)")
    p.add_argument("--steps", default=None, metavar="REGEX",
                   help="regex naming step spans (default ProfilerStep#N; e.g. '^execute_context' for vLLM)")
    p.add_argument("--kernel-wait-us", type=float, default=None,
                   help="gaps shorter than this with work queued count as kernel wait (default 30, like HTA)")
    return p


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write a user-named output atomically; a missing folder or a folder as target is a ``UsageError``."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"output {str(path)!r} is a folder")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"output folder {str(parent)!r} does not exist")
    return fileio.write_atomic(path, text, make_parents=False)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.top < 1:
        raise UsageError("--top must be >= 1")
    kw = {}
    if args.steps is not None:
        kw["step_pattern"] = args.steps
    if args.kernel_wait_us is not None:
        if not math.isfinite(args.kernel_wait_us) or args.kernel_wait_us < 0:
            raise UsageError("--kernel-wait-us must be a finite number >= 0")
        kw["kernel_wait_us"] = args.kernel_wait_us
    for p in (args.trace, args.vs):
        if p is not None and not Path(p).is_file():
            raise UsageError(f"no such trace file: {p}")
    if args.html:
        try:
            import plotly  # noqa: F401
        except ImportError:
            raise UsageError("--html needs plotly, which is not installed (pip install 'labkit[notebook]')") from None
    from labkit.trace.analyze import analyze_trace

    before = analyze_trace(args.trace, **kw)
    diff = None
    if args.vs:
        from labkit.trace.diff import diff_analyses

        diff = diff_analyses(before, analyze_trace(args.vs, **kw))
    # Build every output first, then write: a failure leaves no partial file behind.
    outputs = {}
    if args.json:
        payload = before.to_json(top=args.top)
        if diff is not None:
            payload = {"before": payload, "after": diff.after.to_json(top=args.top), "diff": diff.to_json(top=args.top)}
        outputs[args.json] = json.dumps(payload, indent=1, allow_nan=False) + "\n"
    if args.html:
        from labkit.trace.html import render_report

        outputs[args.html] = render_report(before, other=diff.after if diff is not None else None, top=args.top)
    for line in before.summary_lines(top=min(args.top, 10)):
        print(line)
    if diff is not None:
        print()
        for line in diff.after.summary_lines(top=min(args.top, 10)):
            print(line)
        print()
        for line in diff.summary_lines(top=min(args.top, 10)):
            print(line)
    for path, text in outputs.items():
        write_atomic(path, text)
        print(f"wrote {path}")
    return 0
