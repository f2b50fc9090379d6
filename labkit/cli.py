"""The ``labkit`` command: one parser, a subcommand per verb and per bench target.

Each verb is a module with ``add_cli_args(parser)`` and ``main(args) -> int`` (the pattern of vLLM's
``benchmarks/``); only the module of the verb on the command line is imported. Exit codes: 0
success, 2 bad input (one line on stderr), 1 internal error (``LABKIT_DEBUG=1`` shows the
traceback). ``-v`` may come anywhere. The bench verbs and ``calibrate`` share the options of
:mod:`labkit.bench` (the one bench runner).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from labkit.bench import set_verbose
from labkit.errors import UsageError

#: verb -> (module with ``add_cli_args`` and ``main``, one line of help); ``bench`` has its targets below
VERBS = {
    "env": ("labkit.device", "print this machine's description and slug"),
    "calibrate": ("labkit.calibrate", "the unit costs: tensor vs list reads, pageable vs pinned copies, launches"),
    "bench": (None, "run one benchmark (a target below) and save its result"),
    "results": ("labkit.results_cli", "what the results store holds; --readme rewrites README's findings"),
    "analyze": ("labkit.viz.trace_cli", "a profiler trace (or a vLLM profile folder): idle, bubbles, copies"),
    "whatif": ("labkit.trace.whatif.cli", "what removing a host cost from a trace would buy"),
    "report": ("labkit.report.build", "run the notebooks headless and export the offline report"),
    "vllm": ("labkit.vllm.conformance.cli", "vLLM's real engine here: models, the check, the A/B switch"),
}

#: ``labkit bench TARGET`` -> (module, one line of help); ``vllm-*`` need vLLM
BENCH_TARGETS = {
    "mm": ("labkit.mm.bench_mm", "#40143's scheduler: placeholder calls, the decode step, sweeps, whole workloads"),
    "h2d": ("labkit.attn.bench_h2d", "#38794's prefix-range copies per decode step, per strategy"),
    "ranges": ("labkit.attn.bench_ranges", "host time per step to build the batch's image ranges, per builder"),
    "attn": ("labkit.attn.bench_attn", "the Triton prefix-LM kernel against FlexAttention and masked SDPA"),
    "engine": ("labkit.engine.bench_engine", "the mini engine per variant: tokens/s, step time, device idle"),
    "trace": ("labkit.trace.analysis.bench_trace", "the trace analyzer's speed and memory, beside HTA"),
    "vllm-prefix-ranges": ("labkit.vllm.census.bench_vllm_prefix_ranges",
                    "vLLM's per-step compute_mm_prefix_ranges, installed vs patched (needs vLLM)"),
    "vllm-sched": ("labkit.vllm.census.bench_vllm_sched", "vLLM's real scheduler step per variant (needs vLLM)"),
    "vllm-step": ("labkit.vllm.census.bench_vllm_step", "vLLM's whole engine step, phase by phase (needs vLLM's CPU build)"),
    "vllm-overlap": ("labkit.vllm.census.bench_vllm_overlap", "what vLLM's engine core hides behind a forward of set length "
                                                   "(needs vLLM)"),
    "vllm-input": ("labkit.vllm.processor.bench_vllm_input",
                   "vLLM's input processing of #40143's images (needs vLLM's CPU build)"),
    "serve-sim": ("labkit.serve.bench_serve_sim", "#40143's published table beside the one step model's full-batch peaks"),
}

_VERBOSE = ("-v", "--verbose")


# -- the command -----------------------------------------------------------------------------

def version_text() -> str:
    """``labkit VERSION (commit C)``; the commit as results record it."""
    from labkit import __version__
    from labkit.results import labkit_commit

    return f"labkit {__version__} (commit {labkit_commit()})"


def _attach(p: argparse.ArgumentParser, module: str) -> None:
    mod = importlib.import_module(module)
    mod.add_cli_args(p)
    p.set_defaults(run=mod.main, prog=p.prog)


def build_parser(argv: list[str] = ()) -> argparse.ArgumentParser:
    """The whole ``labkit`` parser; only the verb (and bench target) ``argv`` names has its options."""
    words = [a for a in argv if not a.startswith("-")]
    verb = words[0] if words else None
    target = words[1] if verb == "bench" and len(words) > 1 else None
    targets = "\n".join(f"  {name:<20} {help_}" for name, (_, help_) in BENCH_TARGETS.items())
    p = argparse.ArgumentParser(prog="labkit", formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="labkit: reproduce and go beyond vLLM's multimodal scheduling and H2D fixes.",
                                epilog=f"bench targets (labkit bench TARGET --help):\n{targets}")
    p.add_argument("--version", action="store_true", help="print labkit's version and commit, then exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr (also after the verb)")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    for name, (module, help_) in VERBS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        if name == "bench":
            bench = sp.add_subparsers(dest="target", metavar="TARGET", required=True)
            for tname, (tmodule, thelp) in BENCH_TARGETS.items():
                tp = bench.add_parser(tname, help=thelp, description=thelp)
                if verb == "bench" and tname == target:
                    _attach(tp, tmodule)
        elif name == verb:
            _attach(sp, module)
    return p


def split_verbose(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``-v``/``--verbose`` (anywhere before a ``--``), and whether one was there."""
    cut = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:cut], argv[cut:]
    kept = [a for a in head if a not in _VERBOSE]
    return kept + tail, len(kept) != len(head)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from labkit.results import COMMAND_ENV, format_command

    previous = os.environ.get(COMMAND_ENV)
    # results made by this command (and the notebooks or tools it starts) record its command line
    os.environ[COMMAND_ENV] = format_command(["labkit", *argv])
    prog = "labkit"  # the errors of a verb name it, as argparse's do
    try:
        argv, verbose = split_verbose(argv)
        if argv[:1] == ["report"]:
            from labkit.report import skip_unused_imports

            skip_unused_imports()  # before nbformat is imported (see labkit.report)
        args = build_parser(argv).parse_args(argv)
        args.verbose = verbose or args.verbose
        prog = getattr(args, "prog", prog)
        set_verbose(args.verbose)
        if args.version:
            print(version_text())
            return 0
        if args.verb is None:
            raise UsageError("a verb is needed: one of " + ", ".join(VERBS))
        return int(args.run(args) or 0)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
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
        from labkit.results import keep_unit_costs

        keep_unit_costs(False)  # the verb's run is over (``main`` is also called in-process)
        if previous is None:
            os.environ.pop(COMMAND_ENV, None)
        else:
            os.environ[COMMAND_ENV] = previous
