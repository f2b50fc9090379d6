"""How much of a GPU's peak the step model's parts reach: read from the lab's H200 recordings.

Every efficiency is a fraction of a datasheet peak (:mod:`labkit.facts`): of HBM bandwidth
for the ``*_stream`` ones, of dense bf16 tensor-core throughput for the ``*_compute`` ones. Each
carries where it comes from and whether it is ``assumed`` (not measured for that use).

Measured on the H200 (read from the files at every load, never typed here).

More: docs/reference.md, ``labkit.gpu.device_efficiency``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from labkit.engine.config import get_model_config
from labkit.engine.device.profiles import load_profile
from labkit.errors import UsageError
from labkit.facts import GpuPeak, peak_for
from labkit.results import ATTN_BENCH, find_all

__all__ = ["Efficiency", "Efficiencies", "load_efficiencies", "uniform_efficiencies", "EFFICIENCY_NAMES",
           "MEASURED_ON", "ATTN_VARIANT", "PROFILE_DECODE_ROWS", "PROFILE_PREFILL_TOKENS"]

#: the machine slug whose recordings give the efficiencies
MEASURED_ON = "h200"
#: the ``attn_bench`` variant read (the lab's Triton kernel at its default tile)
ATTN_VARIANT = "triton_prefix"
#: rows of the decode batch ``record_profile`` times (its default ``num_seqs``)
PROFILE_DECODE_ROWS = 128
#: tokens of the prefill shape ``record_profile`` times (8 chunks of 512)
PROFILE_PREFILL_TOKENS = 4096
_GEMM_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")

EFFICIENCY_NAMES = ("gemm_stream", "gemm_compute", "lm_head_stream", "attn_decode_stream",
                    "attn_prefill_sliding_compute", "attn_prefill_global_compute", "gather_stream",
                    "attn_prefill_stream", "attn_decode_compute", "vision_gemm_compute", "vision_attn_compute",
                    "vision_stream")
#: the assumed ones and the measured one each borrows
_BORROWED = {"gather_stream": "gemm_stream", "attn_prefill_stream": "attn_decode_stream",
             "attn_decode_compute": "attn_prefill_global_compute",
             "vision_gemm_compute": "gemm_compute", "vision_attn_compute": "attn_prefill_global_compute",
             "vision_stream": "gemm_stream"}


@dataclass(frozen=True)
class Efficiency:
    """A fraction of peak (``0 < value <= 1``), where it comes from, and whether it is assumed."""

    value: float
    origin: str
    assumed: bool

    def __post_init__(self) -> None:
        if not 0 < self.value <= 1:
            raise UsageError(f"efficiency must be in (0, 1], got {self.value} ({self.origin})")


@dataclass(frozen=True)
class Efficiencies:
    """One GPU's efficiencies by name (:data:`EFFICIENCY_NAMES`)."""

    gpu: str
    by_name: Mapping[str, Efficiency] = field(hash=False)

    def __post_init__(self) -> None:
        missing = [n for n in EFFICIENCY_NAMES if n not in self.by_name]
        if missing:
            raise UsageError(f"efficiencies for {self.gpu} lack {', '.join(missing)}")

    def __getitem__(self, name: str) -> Efficiency:
        return self.by_name[name]

    def rows(self) -> list[dict]:
        """One row per efficiency: ``name``, ``value``, ``assumed``, ``origin``."""
        return [{"name": n, "value": self[n].value, "assumed": self[n].assumed, "origin": self[n].origin}
                for n in EFFICIENCY_NAMES]


def uniform_efficiencies(stream: float, compute: float, gpu: str = "any") -> Efficiencies:
    """Every ``*_stream`` at ``stream`` and every ``*_compute`` at ``compute``, all assumed (for what-ifs, tests)."""
    by = {n: Efficiency(stream if n.endswith("_stream") else compute, "uniform, set by hand", True)
          for n in EFFICIENCY_NAMES}
    return Efficiencies(gpu, by)


def _profile_efficiencies(peak: GpuPeak, profile) -> dict[str, Efficiency]:
    if profile.parametric or not profile.model:
        raise UsageError(f"device profile {profile.name} is not a recording ({profile.origin})")
    cfg = get_model_config(profile.model)
    b = 2  # the recorded stack runs in bf16 on a GPU
    h, i = cfg.hidden_size, cfg.intermediate_size
    shapes = {"qkv_proj": h * cfg.qkv_size, "o_proj": cfg.num_heads * cfg.head_dim * h,
              "gate_up_proj": h * 2 * i, "down_proj": i * h}  # matrix elements of each op
    missing = [op for op in (*_GEMM_OPS, "lm_head") if op not in profile.ops]
    if missing:
        raise UsageError(f"device profile {profile.name} has no {', '.join(missing)}")
    where = f"{profile.describe()['profile_file'] or profile.name} ({profile.origin})"
    dec_ns = sum(profile.duration_ns(op, tokens=PROFILE_DECODE_ROWS) for op in _GEMM_OPS)
    pre_ns = sum(profile.duration_ns(op, tokens=PROFILE_PREFILL_TOKENS) for op in _GEMM_OPS)
    weight_bytes = sum(shapes.values()) * b
    flops = 2 * sum(shapes.values()) * PROFILE_PREFILL_TOKENS
    lm_bytes = cfg.vocab_size * h * b
    lm_ns = profile.duration_ns("lm_head", tokens=PROFILE_DECODE_ROWS)
    bw, fl = peak.mem_tb_s * 1e3, peak.bf16_dense_tflops * 1e3  # bytes/ns, FLOP/ns
    return {
        "gemm_stream": Efficiency(weight_bytes / dec_ns / bw, f"decoder GEMMs' weight bytes / their device time at "
                                  f"{PROFILE_DECODE_ROWS} decode rows, {where}", False),
        "gemm_compute": Efficiency(flops / pre_ns / fl, f"decoder GEMMs' FLOPs / their device time at "
                                   f"{PROFILE_PREFILL_TOKENS} prefill tokens, {where}", False),
        "lm_head_stream": Efficiency(lm_bytes / lm_ns / bw, f"LM head weight bytes / its device time at "
                                     f"{PROFILE_DECODE_ROWS} rows, {where}", False),
    }


def _attn_row(rows: list[dict], case: str, path: str) -> dict:
    hits = [r for r in rows if r.get("variant") == ATTN_VARIANT and r.get("case") == case and "median_ns" in r]
    if len(hits) != 1:
        raise UsageError(f"{path}: expected one {ATTN_VARIANT} row of case {case!r}, found {len(hits)}")
    return hits[0]


def _attn_efficiencies(peak: GpuPeak, result) -> dict[str, Efficiency]:
    where = f"attn_bench {result.slug} ({result.size}, {result.created[:10]}), variant {ATTN_VARIANT}"
    dec = _attn_row(result.rows, "decode", where)
    if dec.get("sliding_window", 0) != 0 or dec.get("total_q") != dec.get("num_seqs"):
        raise UsageError(f"{where}: the decode case must be one query per row over whole contexts")
    b = 2 if dec.get("dtype", "bfloat16") in ("bfloat16", "float16") else 4
    # labkit.viz.lab.roofline's rule: Q read and O written once, K and V of every needed key once
    dec_bytes = (2 * dec["total_q"] * dec["num_heads"] * dec["head_dim"] * b
                 + 2 * dec["total_kv"] * dec["num_kv_heads"] * dec["head_dim"] * b)
    out = {"attn_decode_stream": Efficiency(dec_bytes / dec["median_ns"] / (peak.mem_tb_s * 1e3),
                                            f"decode case K/V + Q/O bytes per second, {where}", False)}
    for name, case in (("attn_prefill_sliding_compute", "prefill_local"),
                       ("attn_prefill_global_compute", "prefill_global")):
        row = _attn_row(result.rows, case, where)
        out[name] = Efficiency(row["flops"] / row["median_ns"] / (peak.bf16_dense_tflops * 1e3),
                               f"{case} case FLOPs per second, {where}", False)
    return out


@functools.lru_cache(maxsize=8)
def _measured(results_root: str | None, profile_name: str) -> tuple[tuple[str, Efficiency], ...]:
    found = find_all(ATTN_BENCH, machine=MEASURED_ON, source="measured-gpu", root=results_root)
    if not found:
        raise UsageError(f"no measured attn_bench result for {MEASURED_ON} under "
                         f"{results_root or 'the results store'}: the device model reads its efficiencies there")
    result = found[0]
    peak = peak_for(result.machine.get("gpu_name"))
    profile = load_profile(profile_name)
    ppeak = peak_for(profile.gpu_name)
    if peak is None or ppeak is None or peak.name != ppeak.name:
        raise UsageError(f"the attn_bench GPU ({result.machine.get('gpu_name')}) and the profile's GPU "
                         f"({profile.gpu_name}) must be one GPU of the peak table")
    measured = {**_profile_efficiencies(ppeak, profile), **_attn_efficiencies(peak, result)}
    borrowed = {name: Efficiency(measured[src].value, f"assumed: {src}'s value ({measured[src].origin})", True)
                for name, src in _BORROWED.items()}
    return tuple({**measured, **borrowed}.items())


def load_efficiencies(gpu: str, *, results_root: str | Path | None = None,
                      profile: str = MEASURED_ON) -> Efficiencies:
    """The efficiencies of ``gpu`` (``"h200"`` or ``"h100"``) from the H200 recordings (module text)."""
    if gpu not in ("h100", "h200"):
        raise UsageError(f"no efficiencies for GPU {gpu!r}: choose h100 or h200")
    by = dict(_measured(None if results_root is None else str(results_root), profile))
    if gpu != MEASURED_ON:
        by = {n: Efficiency(e.value, f"assumed for the {gpu.upper()}: the {MEASURED_ON.upper()}'s value "
                                     f"(same Hopper SM, not measured on an {gpu.upper()}); {e.origin}", True)
              for n, e in by.items()}
    return Efficiencies(gpu, by)
