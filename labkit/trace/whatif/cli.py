"""``labkit whatif TRACE [--scale NAME=FACTOR]... [--unsync NAME]... [--drop-copies NAME[=KEEP]]... [--suggest]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.analysis.trace import Trace
from labkit.trace.outputs import check_outputs, finish, json_text, render_whatif
from labkit.trace.read.columns import keep_freed_memory
from labkit.trace.whatif.changes import parse_changes
from labkit.trace.whatif.predict import predict


def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = ("Predict the step time if some host work were cheaper, some copies did not synchronize "
                          "or were not made, by replaying a profiler trace; --suggest lists what to change.")
    parser.add_argument("trace", help="Kineto trace (.json or .json.gz), e.g. vLLM's *.pt.trace.json.gz")
    parser.add_argument("--scale", action="append", metavar="NAME=FACTOR", default=[],
                        help="multiply the time of host spans matching regex NAME (and the work inside) by FACTOR")
    parser.add_argument("--unsync", action="append", metavar="NAME", default=[],
                        help="make synchronizing calls matching regex NAME (own, copy or enclosing span name) "
                             "non-blocking")
    parser.add_argument("--drop-copies", action="append", metavar="NAME[=KEEP]", default=[],
                        help="remove the pageable host-to-device copies made inside host spans matching regex NAME, "
                             "all but KEEP a step (default 0): their device ops, waits and share of the span's "
                             "host work")
    parser.add_argument("--suggest", action="store_true",
                        help="list the host spans, synchronizing call sites and repeated copies worth changing, "
                             "each with its argument and predicted step time")
    parser.add_argument("--steps", default=None, metavar="REGEX",
                        help="regex naming step spans (default ProfilerStep#N, then vLLM's execute_model/"
                             "execute_context)")
    parser.add_argument("--json", metavar="OUT", help="write the answer as JSON to OUT")
    parser.add_argument("--html", metavar="OUT", help="write a small offline HTML page to OUT")
    return parser


def main(args: argparse.Namespace) -> int:
    changes = parse_changes(args.scale, args.unsync, args.drop_copies)
    if not Path(args.trace).is_file():
        raise UsageError(f"no such trace file: {args.trace}")
    outs = check_outputs({"--json": args.json, "--html": args.html}, [Path(args.trace)])
    keep_freed_memory()
    w = predict(Trace(args.trace), changes, steps=args.steps, suggest=args.suggest)
    texts = {}
    if "--json" in outs:
        texts[outs["--json"]] = json_text(w.to_json())
    if "--html" in outs:
        texts[outs["--html"]] = render_whatif(w)
    for line in w.warnings:
        print(f"labkit: warning: {line}", file=sys.stderr)
    return finish(w.summary_lines(), texts)
