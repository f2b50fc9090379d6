"""``labkit whatif TRACE [--scale NAME=FACTOR]... [--unsync NAME]...``: the what-if replay's command line.

Prints measured vs predicted (``labkit.trace.whatif.predict``) and writes the answer as JSON
(``--json``) and a small offline page (``--html``); output paths are checked before any work.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.whatif.predict import predict
from labkit.trace.whatif.replay import parse_changes


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="labkit whatif", description="Predict the step time if some host work "
                                "were cheaper or some copies did not synchronize, by replaying a profiler trace.")
    p.add_argument("trace", help="Kineto trace (.json or .json.gz), e.g. vLLM's *.pt.trace.json.gz")
    p.add_argument("--scale", action="append", metavar="NAME=FACTOR", default=[],
                   help="multiply the time of host spans matching regex NAME (and the work inside) by FACTOR")
    p.add_argument("--unsync", action="append", metavar="NAME", default=[],
                   help="make synchronizing calls matching regex NAME (own, copy or enclosing span name) non-blocking")
    p.add_argument("--steps", default=None, metavar="REGEX",
                   help="regex naming step spans (default ProfilerStep#N, then vLLM's execute_model/execute_context)")
    p.add_argument("--json", metavar="OUT", help="write the answer as JSON to OUT")
    p.add_argument("--html", metavar="OUT", help="write a small offline HTML page to OUT")
    return p


def main(argv: list[str] | None = None) -> int:
    from labkit.trace.outputs import write_atomic
    from labkit.trace.whatif.html import render_whatif

    args = _parser().parse_args(argv)
    changes = parse_changes(args.scale, args.unsync)
    if not Path(args.trace).is_file():
        raise UsageError(f"no such trace file: {args.trace}")
    for out in (args.json, args.html):
        if out is not None:
            o = Path(out)
            if o.is_dir():
                raise UsageError(f"output {out!r} is a folder")
            if not (o.parent if str(o.parent) else Path(".")).is_dir():
                raise UsageError(f"output folder {str(o.parent)!r} does not exist")
    w = predict(args.trace, changes, steps=args.steps)
    outputs = {}
    if args.json:
        outputs[args.json] = json.dumps(w.to_json(), indent=1, allow_nan=False) + "\n"
    if args.html:
        outputs[args.html] = render_whatif(w)
    for line in w.summary_lines():
        print(line)
    for path, text in outputs.items():
        write_atomic(path, text)
        print(f"wrote {path}")
    return 0
