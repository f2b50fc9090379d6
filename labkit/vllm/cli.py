"""What the command lines of the vLLM-facing code share: the bench verbs' parser and the error wrapper.

The vLLM bench verbs (``labkit bench vllm-ranges``, ``labkit bench vllm-sched``) share
:func:`bench_parser` (the sweep grid and the run options of every bench verb); they,
``python -m labkit.vllm.ab`` and ``labkit vllm`` (:mod:`labkit.vllm.conformance.cli`) share
:func:`run_main` (bad input: one line on stderr and exit 2) and :func:`parse_image_size`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from labkit.errors import UsageError

__all__ = ["add_grid_options", "grid_from_args", "bench_parser", "run_main", "parse_image_size"]


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


def parse_image_size(text: str) -> tuple[int, int]:
    """``HxW`` -> ``(width, height)``."""
    try:
        h, w = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--image-size must look like 64x96 (height x width), got {text!r}") from None
    if w < 1 or h < 1:
        raise UsageError(f"--image-size must be positive, got {text!r}")
    return w, h
