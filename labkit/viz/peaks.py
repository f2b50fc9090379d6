"""GPU peaks for a roofline: dense BF16 tensor-core TFLOP/s and memory TB/s, from datasheets.

The table is data (``gpu_peaks.json`` beside this module), one entry per GPU with the
figures, the memory, the regular expressions that recognise the name torch reports
(``torch.cuda.get_device_name``; tried in table order, so ``H200 NVL`` before ``H200``) and
the document each figure comes from. Datasheets quote BF16 "with sparsity" (2:4 structured);
the table holds the dense figure, half of it, which is what an attention kernel can reach.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).resolve().parent / "gpu_peaks.json"


@dataclass(frozen=True)
class GpuPeak:
    """One GPU's peaks: ``bf16_dense_tflops`` (1e12 FLOP/s), ``mem_tb_s`` (1e12 bytes/s), and their ``source``."""

    name: str
    bf16_dense_tflops: float
    mem_tb_s: float
    memory: str
    source: str
    match: tuple[str, ...]

    @property
    def ridge_flop_per_byte(self) -> float:
        """The ridge point: the arithmetic intensity (FLOP/byte) where memory and compute bounds meet."""
        return self.bf16_dense_tflops / self.mem_tb_s

    def attainable_tflops(self, flop_per_byte: float) -> float:
        """The roof at ``flop_per_byte``: ``min(peak compute, intensity x peak bandwidth)`` in TFLOP/s."""
        return min(self.bf16_dense_tflops, flop_per_byte * self.mem_tb_s)


@functools.lru_cache(maxsize=2)
def load_peaks(path: Path | str = TABLE) -> tuple[GpuPeak, ...]:
    """Every entry of the peak table, in table order."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return tuple(GpuPeak(name=g["name"], bf16_dense_tflops=float(g["bf16_dense_tflops"]),
                         mem_tb_s=float(g["mem_tb_s"]), memory=str(g.get("memory", "")), source=str(g["source"]),
                         match=tuple(g["match"])) for g in data["gpus"])


def peak_for(gpu_name: str | None, peaks: tuple[GpuPeak, ...] | None = None) -> GpuPeak | None:
    """The table entry for a GPU as torch names it (``"NVIDIA H200"``), or None when none matches."""
    if not gpu_name:
        return None
    for peak in peaks if peaks is not None else load_peaks():
        if any(re.search(p, gpu_name, re.I) for p in peak.match):
            return peak
    return None
