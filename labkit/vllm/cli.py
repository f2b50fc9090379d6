"""What the command lines of the vLLM-facing code share: the sweep grid (``labkit bench vllm-ranges``,
``vllm-sched``, ``vllm-step``) and ``HxW`` image sizes."""

from __future__ import annotations

import argparse

from labkit.errors import UsageError

__all__ = ["add_grid_options", "grid_from_args", "parse_image_size"]


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


def parse_image_size(text: str) -> tuple[int, int]:
    """``HxW`` -> ``(width, height)``."""
    try:
        h, w = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--image-size must look like 64x96 (height x width), got {text!r}") from None
    if w < 1 or h < 1:
        raise UsageError(f"--image-size must be positive, got {text!r}")
    return w, h
