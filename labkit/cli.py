"""The ``labkit`` command: ``env``, ``calibrate``, ``bench TARGET``, ``results``, ``analyze``, ``report``.

Each verb lives in its own module, imported only when used, exposing ``main(argv) -> int``.
Exit codes: 0 success, 2 bad input (one line on stderr), 1 internal error.
Set ``LABKIT_DEBUG=1`` to see tracebacks of internal errors.

Every bench verb and ``labkit calibrate`` share the run options of :func:`add_run_options`:
``--size quick|full`` (default quick; quick results are saved as ``<name>_quick``), ``--json
OUT``, ``--no-save`` and ``-v/--verbose``; ``-v`` is accepted anywhere on the command line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from pathlib import Path

from labkit.errors import UsageError

#: verb -> module with ``main(argv) -> int``
VERBS = {
    "calibrate": "labkit.calibrate",
    "results": "labkit.results_cli",
    "analyze": "labkit.trace.analysis.cli",
    "whatif": "labkit.trace.whatif.cli",
    "report": "labkit.report.build",
    "vllm": "labkit.vllm.conformance.cli",  # needs vLLM: run it in .venv-vllm-cpu
}

#: ``labkit bench TARGET`` -> module with ``main(argv) -> int``
BENCH_TARGETS = {
    "mm": "labkit.mm.bench",
    "h2d": "labkit.attn.bench_h2d",
    "ranges": "labkit.attn.bench_ranges",
    "attn": "labkit.attn.bench_attn",
    "engine": "labkit.engine.bench",
    "trace": "labkit.trace.analysis.bench",
    "vllm-ranges": "labkit.vllm.census.nextbubble",  # needs vLLM: run it in .venv-vllm
    "vllm-sched": "labkit.vllm.census.sched_bench",  # needs vLLM: run it in .venv-vllm
    "vllm-step": "labkit.vllm.census.step_bench",  # needs vLLM's CPU build: run it in .venv-vllm-cpu
    "vllm-input": "labkit.vllm.processor.input_processing",  # needs vLLM's CPU build: run it in .venv-vllm-cpu
    "serve-sim": "labkit.serve.bench",  # needs vLLM's CPU build: run it in .venv-vllm-cpu
}

#: run sizes of every bench verb and ``labkit calibrate`` (the first is the default)
RUN_SIZES = ("quick", "full")
_VERBOSE = ("-v", "--verbose")


# -- options shared by every bench verb and calibrate ----------------------------------------

def add_run_options(p: argparse.ArgumentParser, *, json_help: str = "also write the result(s) as JSON to OUT",
                    size_help: str = "quick (default: seconds to minutes) or full (the recorded size)") -> None:
    """Add ``--size``, the deprecated ``--quick``/``--full``, ``--json OUT``, ``--no-save`` and ``-v``."""
    p.add_argument("--size", choices=RUN_SIZES, default=None, help=size_help)
    p.add_argument("--quick", action="store_true", help="deprecated: use --size quick")
    p.add_argument("--full", action="store_true", help="deprecated: use --size full")
    p.add_argument("--json", metavar="OUT", default=None, help=json_help)
    p.add_argument("--no-save", action="store_true", help="do not write to the results store")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")


def resolve_run_options(args: argparse.Namespace, prog: str) -> str:
    """Check the shared options before any work starts; returns the size (``quick`` or ``full``).

    An old ``--quick``/``--full`` still works, with a deprecation note on stderr; contradicting
    flags, or a ``--json`` path that is a folder, are a ``UsageError``.
    """
    old = [flag for flag, on in (("quick", args.quick), ("full", args.full)) if on]
    if len(old) > 1:
        raise UsageError("choose --size quick or --size full, not both --quick and --full")
    if old:
        print(f"{prog}: note: --{old[0]} is deprecated, use --size {old[0]}", file=sys.stderr)
        if args.size is not None and args.size != old[0]:
            raise UsageError(f"--{old[0]} contradicts --size {args.size}")
    size = args.size or (old[0] if old else RUN_SIZES[0])
    if args.json is not None:
        out = Path(args.json)
        if not args.json or out.is_dir():
            raise UsageError(f"--json {args.json!r} is not a file path")
        if out.parent.exists() and not out.parent.is_dir():
            raise UsageError(f"--json {args.json}: {out.parent} is not a folder")
    if args.verbose:
        set_verbose()
    args.size = size
    return size


def emit_result(result, args: argparse.Namespace) -> None:
    """Save ``result`` to the results store unless ``--no-save``, and write it to ``--json OUT``."""
    if not args.no_save:
        from labkit.results import save_result

        print(f"saved {save_result(result)}")
    if args.json:
        from labkit.fileio import write_json

        write_json(args.json, result.to_json())
        print(f"wrote {args.json}")


def set_verbose(on: bool = True) -> None:
    """Log the lab's progress (INFO) to stderr."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(format="%(name)s: %(message)s")
    root.setLevel(logging.INFO if on else logging.WARNING)


# -- the command -----------------------------------------------------------------------------

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


def version_text() -> str:
    """``labkit VERSION (commit C)``; the commit as results record it."""
    from labkit import __version__
    from labkit.results import labkit_commit

    return f"labkit {__version__} (commit {labkit_commit()})"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="labkit",
        description="labkit: reproduce and go beyond vLLM's multimodal scheduling and H2D fixes.",
    )
    p.add_argument("--version", action="store_true", help="print labkit's version and commit, then exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr (also after the verb)")
    p.add_argument("verb", nargs="?", choices=["env", "bench", *sorted(VERBS)], help="what to do")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the verb's own options (labkit VERB --help)")
    return p


def split_verbose(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``-v``/``--verbose`` (anywhere before a ``--``), and whether one was there."""
    if "--" in argv:
        cut = argv.index("--")
        head, tail = argv[:cut], argv[cut:]
    else:
        head, tail = argv, []
    kept = [a for a in head if a not in _VERBOSE]
    return kept + tail, len(kept) != len(head)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from labkit.results import COMMAND_ENV, format_command

    previous = os.environ.get(COMMAND_ENV)
    # results made by this command (and the notebooks or tools it starts) record its command line
    os.environ[COMMAND_ENV] = format_command(["labkit", *argv])
    try:
        argv, verbose = split_verbose(argv)
        args = _parser().parse_args(argv)
        set_verbose(verbose or args.verbose)
        if args.version:
            print(version_text())
            return 0
        if args.verb is None:
            raise UsageError("a verb is needed: one of env, bench, " + ", ".join(sorted(VERBS)))
        if args.verb == "env":
            return _env(args.rest)
        if args.verb == "bench":
            return _bench(args.rest)
        if args.verb == "report":
            from labkit.report.startup import skip_unused_imports

            skip_unused_imports()  # before nbformat is imported (see labkit.report.startup)
        module = importlib.import_module(VERBS[args.verb])
        return int(module.main(args.rest) or 0)
    except UsageError as exc:
        print(f"labkit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("labkit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `labkit results | head`: the reader left, nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
        return exc.code if isinstance(exc.code, int) else 2
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        if os.environ.get("LABKIT_DEBUG"):
            raise
        print(f"labkit: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if previous is None:
            os.environ.pop(COMMAND_ENV, None)
        else:
            os.environ[COMMAND_ENV] = previous


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
