"""The ``labkit`` command: ``env``, ``calibrate``, ``bench TARGET``, ``analyze``, ``report``.

Each verb lives in its own module, imported only when used, exposing ``main(argv) -> int``.
Exit codes: 0 success, 2 bad input (one line on stderr), 1 internal error.
Set ``LABKIT_DEBUG=1`` to see tracebacks of internal errors.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys

from labkit.errors import UsageError

#: verb -> module with ``main(argv) -> int``
VERBS = {
    "calibrate": "labkit.calibrate",
    "analyze": "labkit.trace.cli",
    "report": "labkit.report.build",
}

#: ``labkit bench TARGET`` -> module with ``main(argv) -> int``
BENCH_TARGETS = {
    "mm": "labkit.mm.bench",
    "h2d": "labkit.attn.bench_h2d",
    "ranges": "labkit.attn.bench_ranges",
    "attn": "labkit.attn.bench_attn",
    "engine": "labkit.engine.bench",
    "trace": "labkit.trace.bench",
    "vllm-ranges": "labkit.nextbubble",  # needs vLLM: run it in .venv-vllm
}


def _env(argv: list[str]) -> int:
    from labkit.device import describe_machine

    p = argparse.ArgumentParser(prog="labkit env", description="Print this machine's description.")
    p.add_argument("--device", default=None, help="auto (default), cpu or cuda")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    desc = describe_machine(args.device)
    if args.json:
        print(json.dumps(desc, indent=1))
    else:
        width = max(len(k) for k in desc)
        for key, value in desc.items():
            print(f"{key:<{width}}  {value}")
    return 0


def _bench(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="labkit bench", description="Run a benchmark and save its result.")
    p.add_argument("target", choices=sorted(BENCH_TARGETS), help="which benchmark")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the target's own options (see labkit bench TARGET --help)")
    args = p.parse_args(argv)
    module = importlib.import_module(BENCH_TARGETS[args.target])
    return int(module.main(args.rest) or 0)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="labkit",
        description="labkit: reproduce and go beyond vLLM's multimodal scheduling and H2D fixes.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    p.add_argument("verb", choices=["env", "bench", *sorted(VERBS)], help="what to do")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the verb's own options (labkit VERB --help)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
        if args.verb == "env":
            return _env(args.rest)
        if args.verb == "bench":
            return _bench(args.rest)
        module = importlib.import_module(VERBS[args.verb])
        return int(module.main(args.rest) or 0)
    except UsageError as exc:
        print(f"labkit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("labkit: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
        return exc.code if isinstance(exc.code, int) else 2
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        if os.environ.get("LABKIT_DEBUG"):
            raise
        print(f"labkit: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
