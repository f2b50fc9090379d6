"""How much slower (or faster) the GPU node's host is than this CPU, from the lab's calibrations.

Rule: for each unit cost both calibrations hold (``tensor_index_int``: one torch tensor index and
``int()``, the pre-#40143 read; ``loop_only``: one Python loop iteration), the ratio of the GPU
node's median ns to this CPU's; the factor is the geometric mean of those ratios. A host time
measured here times the factor is that time on the GPU node's host (> 1: that host is slower).
Nothing is fitted: both calibrations are recorded results.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.errors import UsageError

__all__ = ["UNIT_COSTS", "CpuSpeed", "cpu_speed_from_rows", "load_cpu_speed"]

#: the calibration rows (``variant``) the factor is derived from
UNIT_COSTS = ("tensor_index_int", "loop_only")
RULE = ("geometric mean over calibration rows tensor_index_int and loop_only of "
        "median_ns(GPU node's host) / median_ns(the machine the host cost was recorded or measured on)")


@dataclass(frozen=True)
class CpuSpeed:
    """The factor and how it was derived (``ratios``: unit cost -> GPU host / this CPU)."""

    factor: float
    ratios: dict
    rule: str = RULE

    def as_dict(self) -> dict:
        return asdict(self)


def _medians(rows) -> dict:
    return {r["variant"]: float(r["median_ns"]) for r in rows
            if r.get("variant") in UNIT_COSTS and r.get("median_ns") is not None}


def cpu_speed_from_rows(target_rows, here_rows) -> CpuSpeed:
    """The factor from two calibrations' rows; ``UsageError`` when a unit cost is missing."""
    target, here = _medians(target_rows), _medians(here_rows)
    missing = [u for u in UNIT_COSTS if u not in target or u not in here or here[u] <= 0 or target[u] <= 0]
    if missing:
        raise UsageError(f"the calibrations lack the unit costs {', '.join(missing)}")
    ratios = {u: target[u] / here[u] for u in UNIT_COSTS}
    return CpuSpeed(math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios)), ratios)


def load_cpu_speed(target_path, here_path) -> CpuSpeed:
    """The factor from two recorded calibration files (``labkit calibrate``)."""
    rows = []
    for p in (target_path, here_path):
        try:
            rows.append(json.loads(Path(p).read_text(encoding="utf-8"))["rows"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"cannot read the calibration {p}: {exc}") from None
    return cpu_speed_from_rows(rows[0], rows[1])
