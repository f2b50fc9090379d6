"""``labkit bench attn``: the prefix-LM Triton kernel against FlexAttention and masked SDPA.

More: docs/reference.md, ``labkit.attn.bench_attn``.
"""

from __future__ import annotations

import argparse
import logging
import math
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Callable

import torch

from labkit.attn.prefix_mask import count_allowed_pairs, make_prefix_lm_mask_mod, padded_prefix_lm_mask
from labkit.bench import Bench, add_run_options, report, resolve_run_options
from labkit.errors import UsageError
from labkit.results import ATTN_BENCH
from labkit.timing import stopwatch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttnCase:
    """One benchmark shape: per-row ``(q_len, kv_len)`` and image ranges, and the head config."""

    name: str
    seq_lens: tuple[tuple[int, int], ...]
    ranges: tuple[tuple[tuple[int, int], ...], ...]  # per row, inclusive (start, end)
    num_heads: int = 8
    num_kv_heads: int = 4
    head_dim: int = 256
    sliding_window: int = 0
    note: str = ""

    @property
    def total_q(self) -> int:
        return sum(a for a, _ in self.seq_lens)

    def allowed_pairs(self) -> int:
        return sum(count_allowed_pairs(a, b, r, self.sliding_window) for (a, b), r in zip(self.seq_lens, self.ranges))

    def flops(self) -> int:
        """Attention FLOPs over allowed pairs only: ``4 * D * H * pairs`` (QK^T and PV, 2 each)."""
        return 4 * self.head_dim * self.num_heads * self.allowed_pairs()


def image_prompt(num_images: int = 32, image_tokens: int = 256, *, lead: int = 64, gap: int = 8, tail: int = 40):
    """A Gemma-3-like prompt: ``(length, ranges)``, one inclusive range per image's soft tokens."""
    pos, ranges = lead, []
    for _ in range(num_images):
        start = pos + 1
        ranges.append((start, start + image_tokens - 1))
        pos = start + image_tokens + 1 + gap
    return pos + tail, tuple(ranges)


def _cases() -> dict[str, AttnCase]:
    n, rng = image_prompt()
    decode_rows = tuple((1, n + 1 + 7 * i) for i in range(128))
    # the chunk ends between images (vLLM never splits an image across steps for these models)
    mixed = ((2048, 64 + 266 * 15),) + tuple((1, n + 1 + 11 * i) for i in range(64))
    tiny_len, tiny_rng = image_prompt(2, 8, lead=5, gap=3, tail=4)
    return {
        "prefill_local": AttnCase("prefill_local", ((n, n),), (rng,), sliding_window=1024,
                                  note="32 images x 256 + text, local (sliding-window 1024) layer"),
        "prefill_global": AttnCase("prefill_global", ((n, n),), (rng,), note="32 images x 256 + text, global layer"),
        "decode": AttnCase("decode", decode_rows, (rng,) * 128, note="128 decode rows over ~8.6k keys"),
        "mixed": AttnCase("mixed", mixed, (rng,) * 65, sliding_window=1024,
                          note="a 2048-token prefill chunk + 64 decode rows, local layer"),
        "tiny": AttnCase("tiny", ((tiny_len, tiny_len), (20, tiny_len), (1, tiny_len + 3)), (tiny_rng,) * 3,
                         num_heads=4, num_kv_heads=2, head_dim=32, sliding_window=12,
                         note="interpreter check: prefill, chunked prefill, decode"),
    }


CASES = _cases()
#: the result: its cases on a GPU at each size (a CPU runs ``tiny`` under the interpreter) and its table
ATTN = Bench(ATTN_BENCH, axes={"case": (("prefill_local", "prefill_global", "decode"),
                                        ("prefill_local", "prefill_global", "decode", "mixed"))},
             columns=("case", "variant", "median_ms", "tflops", "max_abs_err", "rel_err", "error"),
             params={"flops_rule": "4 * head_dim * num_heads * allowed_pairs",
                     "model": "Gemma-3-4B attention: 8 q heads, 4 kv heads, head_dim 256, window 1024 on local layers"})


def make_inputs(case: AttnCase, device="cpu", dtype=torch.bfloat16, seed: int = 0) -> dict:
    """Random packed inputs for ``case``: q, k, v, cu_seqlens_q/k, prefix_ranges, seq_lens (host)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    total_q = case.total_q
    total_k = sum(b for _, b in case.seq_lens)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)

    cu_q = list(accumulate((a for a, _ in case.seq_lens), initial=0))
    cu_k = list(accumulate((b for _, b in case.seq_lens), initial=0))
    max_r = max((len(r) for r in case.ranges), default=0)
    padded = [list(r) + [(0, 0)] * (max_r - len(r)) for r in case.ranges]
    ranges = torch.tensor(padded, dtype=torch.int32, device=device).view(len(case.seq_lens), max_r, 2) if max_r else None
    return {"q": rand(total_q, case.num_heads, case.head_dim), "k": rand(total_k, case.num_kv_heads, case.head_dim),
            "v": rand(total_k, case.num_kv_heads, case.head_dim),
            "cu_seqlens_q": torch.tensor(cu_q, dtype=torch.int32, device=device),
            "cu_seqlens_k": torch.tensor(cu_k, dtype=torch.int32, device=device), "prefix_ranges": ranges,
            "seq_lens": case.seq_lens}


# -- padded layout for the SDPA / FlexAttention peers ------------------------------------------

def pad_packed(x: torch.Tensor, cu: list[int], lens: list[int], pad: int) -> torch.Tensor:
    """Packed ``(total, H, D)`` -> left-aligned padded ``(B, H, pad, D)`` (zeros beyond each row)."""
    out = x.new_zeros((len(lens), x.shape[1], pad, x.shape[2]))
    for b, n in enumerate(lens):
        out[b, :, :n] = x[cu[b]:cu[b] + n].transpose(0, 1)
    return out


def unpad(y: torch.Tensor, lens: list[int]) -> torch.Tensor:
    """Padded ``(B, H, pad, D)`` -> packed ``(total, H, D)``."""
    return torch.cat([y[b, :, :n].transpose(0, 1) for b, n in enumerate(lens)], dim=0)


def _padded(case: AttnCase, inputs: dict):
    q_lens = [a for a, _ in case.seq_lens]
    kv_lens = [b for _, b in case.seq_lens]
    cu_q, cu_k = list(accumulate(q_lens, initial=0)), list(accumulate(kv_lens, initial=0))
    qp = pad_packed(inputs["q"], cu_q, q_lens, max(q_lens))
    kp = pad_packed(inputs["k"], cu_k, kv_lens, max(kv_lens))
    vp = pad_packed(inputs["v"], cu_k, kv_lens, max(kv_lens))
    return qp, kp, vp, q_lens


# -- variants ----------------------------------------------------------------------------------

def prepare_triton(case: AttnCase, inputs: dict, config=None) -> Callable[[], torch.Tensor]:
    from labkit.attn.prefix_attention import prefix_attention

    args = {k: inputs[k] for k in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "prefix_ranges")}
    out = torch.empty_like(inputs["q"])
    kw = dict(sliding_window=case.sliding_window, seq_lens=case.seq_lens, config=config, out=out)
    return lambda: prefix_attention(*args.values(), **kw)


def prepare_sdpa(case: AttnCase, inputs: dict) -> Callable[[], torch.Tensor]:
    import torch.nn.functional as F

    qp, kp, vp, q_lens = _padded(case, inputs)
    mask = padded_prefix_lm_mask(case.seq_lens, case.ranges, case.sliding_window, device=qp.device)
    gqa = case.num_heads != case.num_kv_heads
    return lambda: unpad(F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, enable_gqa=gqa), q_lens)


def prepare_flex(case: AttnCase, inputs: dict) -> Callable[[], torch.Tensor]:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    qp, kp, vp, q_lens = _padded(case, inputs)
    mask_mod = make_prefix_lm_mask_mod(case.seq_lens, case.ranges, case.sliding_window, device=qp.device)
    block_mask = create_block_mask(mask_mod, qp.shape[0], None, qp.shape[2], kp.shape[2], device=qp.device)
    compiled = torch.compile(flex_attention, dynamic=False) if qp.is_cuda else flex_attention
    gqa = case.num_heads != case.num_kv_heads
    return lambda: unpad(compiled(qp, kp, vp, block_mask=block_mask, enable_gqa=gqa), q_lens)


VARIANTS: dict[str, Callable] = {
    "triton_prefix": prepare_triton,
    "flex_attention": prepare_flex,
    "sdpa_mask": prepare_sdpa,
}


# -- measuring -----------------------------------------------------------------------------------

@dataclass
class CaseRun:
    """Reference and inputs of one case, shared by its variants."""

    case: AttnCase
    inputs: dict
    ref: torch.Tensor
    flops: int
    pairs: int
    extra: dict = field(default_factory=dict)


def build_case(case: AttnCase, device: str, dtype, seed: int = 0) -> CaseRun:
    """Inputs and an fp32 (GPU) / fp64 (CPU) reference of ``case``."""
    from labkit.attn.prefix_mask import prefix_attention_ref

    inputs = make_inputs(case, device, dtype, seed)
    ref_dtype = torch.float32 if str(device).startswith("cuda") else torch.float64
    args = [inputs[k] for k in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "prefix_ranges")]
    ref = prefix_attention_ref(*args, sliding_window=case.sliding_window, seq_lens=case.seq_lens,
                               compute_dtype=ref_dtype)
    pairs = case.allowed_pairs()
    return CaseRun(case, inputs, ref, 4 * case.head_dim * case.num_heads * pairs, pairs)


def error_metrics(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """``max_abs_err`` and ``rel_err`` (``||out - ref|| / ||ref||``), NaN-safe (NaN fails)."""
    diff = out.to(ref.dtype) - ref
    if not torch.isfinite(out).all():
        return {"max_abs_err": float("nan"), "rel_err": float("nan")}
    return {"max_abs_err": float(diff.abs().max()), "rel_err": float(diff.norm() / ref.norm())}


def run_variant(run: CaseRun, variant: str, *, device: str, timed: bool, repeats: int = 30,
                config=None, label: str | None = None) -> dict:
    """Prepare, check and (on a GPU) time one variant on one case; failures become an ``error`` field."""
    case = run.case
    row = {"variant": label or variant, "case": case.name, "num_seqs": len(case.seq_lens), "total_q": case.total_q,
           "total_kv": sum(b for _, b in case.seq_lens), "num_heads": case.num_heads,
           "num_kv_heads": case.num_kv_heads, "head_dim": case.head_dim, "sliding_window": case.sliding_window,
           "num_ranges": max(len(r) for r in case.ranges), "allowed_pairs": run.pairs, "flops": run.flops,
           "dtype": str(run.inputs["q"].dtype).replace("torch.", "")}
    try:
        with stopwatch() as first:
            prep = VARIANTS[variant]
            fn = prep(case, run.inputs, config=config) if config is not None else prep(case, run.inputs)
            out = fn()
            if str(device).startswith("cuda"):
                torch.cuda.synchronize()
        row["first_call_s"] = round(first.s, 3)  # includes compilation
        row.update(error_metrics(out, run.ref))
        if timed:
            from labkit.timing import time_cuda

            t = time_cuda(fn, warmup=5, repeats=repeats)
            row.update(median_ns=t.median_ns, p20_ns=t.p20_ns, p80_ns=t.p80_ns, median_ms=t.median_ns / 1e6,
                       tflops=run.flops / t.median_ns / 1e3)
    except Exception as exc:  # noqa: BLE001 - a failing peer is recorded, the run goes on
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        logger.warning("%s on %s failed: %s", variant, case.name, row["error"])
    finally:
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
    return row


def run_bench(case_names, variants, *, device: str, sweep: bool | list = False, repeats: int = 30,
              on_rows=None) -> tuple[list[dict], str]:
    """Rows for every case x variant and the result source (``measured-gpu`` or ``interpreted``).

    ``sweep``: True (every case) or the names of the cases to also time with every kernel config
    that fits them. ``on_rows(rows)`` gets every row so far after each one (``PartialResult.update``).
    """
    from labkit.attn.prefix_attention import CUDA_CONFIGS
    from labkit.device import kernel_mode
    from labkit.timing import progress

    gpu = str(device).startswith("cuda")
    if not gpu and kernel_mode() != "interpret":
        raise UsageError("the Triton kernel needs a GPU or the interpreter (TRITON_INTERPRET=1)")
    dtype = torch.bfloat16 if gpu else torch.float32
    rows: list[dict] = []
    done = on_rows or (lambda rows: None)
    swept = set(case_names) if sweep is True else set(sweep or ())
    for name in progress(case_names, desc="attn cases"):
        run = build_case(CASES[name], device, dtype)
        for variant in variants:
            if variant == "flex_attention" and not gpu:
                continue  # compiled FlexAttention needs a GPU; its mask_mod is tested on CPU
            rows.append(run_variant(run, variant, device=device, timed=gpu, repeats=repeats))
            done(rows)
        if name in swept and gpu:
            group_pad = 1 << (run.case.num_heads // run.case.num_kv_heads - 1).bit_length()
            decode_like = max(a for a, _ in run.case.seq_lens) * group_pad <= 16
            for label, cfg in CUDA_CONFIGS.items():
                fits = cfg.block_m <= 16 if decode_like else cfg.block_m >= 64
                if cfg.block_m % group_pad == 0 and fits:
                    rows.append(run_variant(run, "triton_prefix", device=device, timed=True, repeats=repeats,
                                            config=cfg, label=f"triton_prefix[{label}]"))
                    done(rows)
        del run
    return rows, ("measured-gpu" if gpu else "interpreted")


def tile_sweep(rows: list[dict]) -> list[dict]:
    """The tile-shape sweep's rows, each with its ``tile`` in words."""
    from labkit.attn.prefix_attention import CUDA_CONFIGS

    out = []
    for r in rows:
        label = r["variant"][len("triton_prefix["):-1] if r["variant"].startswith("triton_prefix[") else None
        if label in CUDA_CONFIGS:
            out.append(dict(r, tile=CUDA_CONFIGS[label].describe()))
    return out


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", default=None, help=f"comma-separated cases from {', '.join(CASES)}")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated from {', '.join(VARIANTS)}")
    p.add_argument("--sweep", action="store_true", help="also time the kernel with every config in CUDA_CONFIGS")
    p.add_argument("--sweep-cases", default=None, help="with --sweep: only these cases (comma-separated; default: "
                   "every case run)")
    p.add_argument("--repeats", type=int, default=30, help="timed repeats per variant (default 30)")
    p.add_argument("--device", default="auto", help="auto, cuda or cpu (cpu: interpreter check on the tiny case)")
    add_run_options(p, size_help="quick (default): prefill_local, prefill_global, decode; full: also the mixed "
                                 "prefill+decode case (quick results are saved as attn_bench_quick)")


def _names(text: str | None, known, what: str) -> list[str]:
    names = [s.strip() for s in (text or "").split(",") if s.strip()]
    bad = [n for n in names if n not in known]
    if bad:
        raise UsageError(f"unknown {what} {', '.join(bad)}: choose from {', '.join(known)}")
    return names


def main(args: argparse.Namespace) -> int:
    from labkit.device import configure_triton, resolve_device

    size = resolve_run_options(args)
    if args.repeats < 1:
        raise UsageError("--repeats must be >= 1")
    device = resolve_device(args.device)
    configure_triton()  # before anything imports triton (the machine description below does)
    variants = _names(args.variants, VARIANTS, "variant")
    if args.cases:
        cases = _names(args.cases, CASES, "case")
    elif device == "cuda":
        cases = list(ATTN.at(size)["case"])
    else:
        cases = ["tiny"]
    sweep_cases = _names(args.sweep_cases, CASES, "case") if args.sweep_cases else list(cases)
    if args.sweep_cases and not args.sweep:
        raise UsageError("--sweep-cases needs --sweep")
    if set(sweep_cases) - set(cases):
        raise UsageError(f"--sweep-cases {', '.join(sorted(set(sweep_cases) - set(cases)))} not among the cases run")
    if device != "cuda":
        print("no GPU: running the kernel under the Triton interpreter on a small case, correctness only "
              "(speed needs a GPU)")
    from labkit.results import PartialResult

    params = {"cases": cases, "variants": variants, "sweep": args.sweep,
              "sweep_cases": sweep_cases if args.sweep else [], "repeats": args.repeats,
              "case_notes": {n: CASES[n].note for n in cases}}
    draft = ATTN.result([], size, params=params, source="measured-gpu" if device == "cuda" else "interpreted")
    partial = PartialResult(draft.name, params=draft.params, source=draft.source, size=size, save=not args.no_save)
    rows, source = run_bench(cases, variants, device=device, sweep=sweep_cases if args.sweep else False,
                             repeats=args.repeats, on_rows=partial.update)
    report(args, ATTN.result(rows, size, params=params, source=source), ATTN.columns)
    failed = [line for line in kernel_checks(rows) if line.startswith("FAILED")]
    for line in failed:
        print(line)
    return 1 if failed else 0


#: largest relative error (``||out - ref|| / ||ref||``) of a kernel row against the fp32/fp64
#: reference, per input dtype: a few bf16/fp16 roundings of O(1) values, far below a wrong mask
REL_TOL = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-4}


def kernel_checks(rows: list[dict]) -> list[str]:
    """One line per kernel row: that it matches the reference (``REL_TOL``), or ``FAILED: ...`` and why."""
    lines = []
    for r in rows:
        if not r["variant"].startswith("triton_prefix"):
            continue
        what = f"{r['variant']} on {r['case']}"
        if kernel_row_ok(r):
            lines.append(f"{what} matches the reference: relative error {r['rel_err']:.1e}, max abs error "
                         f"{r['max_abs_err']:.1e} (tolerance {REL_TOL[r['dtype']]:g} in {r['dtype']})")
        else:
            why = r.get("error") or (f"relative error {r.get('rel_err')} against the reference "
                                     f"(tolerance {REL_TOL.get(r.get('dtype'), 1e-4)})")
            lines.append(f"FAILED: {what}: {why}")
    return lines


def kernel_row_ok(row: dict) -> bool:
    """A kernel row ran and matches the reference within ``REL_TOL`` for its dtype (NaN fails)."""
    rel = row.get("rel_err", float("nan"))
    return "error" not in row and math.isfinite(row.get("max_abs_err", float("nan"))) and math.isfinite(rel) \
        and rel <= REL_TOL.get(row.get("dtype"), 1e-4)
