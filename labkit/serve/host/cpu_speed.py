"""How much slower (or faster) the GPU node's host is than this CPU, from the lab's calibrations.

Rule: for each unit cost both calibrations hold (``tensor_index_int``: one torch tensor index and
``int()``, the pre-#40143 read; ``loop_only``: one Python loop iteration), the ratio of the GPU
node's median ns to this CPU's; the factor is the geometric mean of those ratios. A host time
measured here times the factor is that time on the GPU node's host (> 1: that host is slower).
Nothing is fitted: both calibrations are recorded results.

A host cost and the calibration it is scaled by are best measured in the same run: these
machines' speed moves by tens of percent from one hour to the next, and a cost recorded in a
slow hour scaled by a calibration of a fast one reads as a host that is not there. A result that
ran the unit costs itself keeps them in ``params["calibration_in_run"]`` (:func:`in_run_calibration`:
a list of rows, or per grid point a list of rows); :func:`calibration_of` prefers those to the
machine's ``calibration.json`` and says which it used.

The API server's intake (JPEG decode, the HF image processor, the request's JSON) is memory and
SIMD work the two unit costs above do not describe, so where both the GPU node's calibration and
the input processing's own run hold the image path's unit cost (:data:`IMAGE_UNIT_COSTS`,
:func:`labkit.calibrate.image_path`) the intake is scaled by that ratio alone;
:func:`serve_speeds` says which.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.errors import UsageError

__all__ = ["UNIT_COSTS", "IMAGE_UNIT_COSTS", "IN_RUN_KEY", "has_units", "CpuSpeed", "cpu_speed_from_rows",
           "load_cpu_speed", "in_run_calibration", "calibration_of", "serve_speeds", "describe_speeds"]

#: the intake's unit cost (images decoded, resized, normalized): what the input processing is scaled by
#: where both machines measured it (:func:`labkit.calibrate.image_path`)
IMAGE_UNIT_COSTS = ("image_decode_resize",)
#: where a result keeps the unit costs it measured in its own run
IN_RUN_KEY = "calibration_in_run"

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


def _medians(rows, units=UNIT_COSTS + IMAGE_UNIT_COSTS) -> dict:
    return {r["variant"]: float(r["median_ns"]) for r in rows
            if r.get("variant") in units and r.get("median_ns") is not None}


def cpu_speed_from_rows(target_rows, here_rows, units=UNIT_COSTS) -> CpuSpeed:
    """The factor from two calibrations' rows over ``units``; ``UsageError`` when a unit cost is missing."""
    target, here = _medians(target_rows, units), _medians(here_rows, units)
    missing = [u for u in units if u not in target or u not in here or here[u] <= 0 or target[u] <= 0]
    if missing:
        raise UsageError(f"the calibrations lack the unit costs {', '.join(missing)}")
    ratios = {u: target[u] / here[u] for u in units}
    rule = RULE if tuple(units) == UNIT_COSTS else RULE.replace("tensor_index_int and loop_only", " and ".join(units))
    return CpuSpeed(math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios)), ratios, rule)


def has_units(rows, units) -> bool:
    """Whether ``rows`` (a calibration's) hold every one of ``units``."""
    return all(u in _medians(rows, units) for u in units)


def load_cpu_speed(target_path, here_path) -> CpuSpeed:
    """The factor from two recorded calibration files (``labkit calibrate``)."""
    rows = []
    for p in (target_path, here_path):
        try:
            rows.append(json.loads(Path(p).read_text(encoding="utf-8"))["rows"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"cannot read the calibration {p}: {exc}") from None
    return cpu_speed_from_rows(rows[0], rows[1])


def in_run_calibration(repeats: int = 20, *, images: bool = False) -> list[dict]:
    """The unit costs (:data:`UNIT_COSTS`; with ``images`` also :data:`IMAGE_UNIT_COSTS` where Pillow
    imports), measured now in this process: rows as ``labkit calibrate`` writes them (a second or two)."""
    from labkit.calibrate import calibrate_cpu, calibrate_image

    return calibrate_cpu(repeats=repeats, variants=UNIT_COSTS) + (calibrate_image() if images else [])


def calibration_of(doc: dict, fallback: dict | None) -> tuple[list, str]:
    """``(rows, where)``: the unit costs ``doc`` (a result) measured in its own run (the median per
    unit cost over its grid points, where it holds one list per point), else ``fallback``'s rows
    (the machine's recorded calibration). ``UsageError`` when neither holds them."""
    kept = (doc.get("params") or {}).get(IN_RUN_KEY)
    lists = list(kept.values()) if isinstance(kept, dict) else ([kept] if kept else [])
    by: dict = {}
    for rows in lists:
        for unit, ns in _medians(rows).items():
            by.setdefault(unit, []).append(ns)
    if all(u in by for u in UNIT_COSTS):
        import statistics

        where = "in its own run" + (f" (median over {len(lists)} points)" if len(lists) > 1 else "")
        return [{"variant": u, "median_ns": statistics.median(v)} for u, v in by.items()], where
    if fallback is None or not _medians(fallback.get("rows") or []):
        raise UsageError(f"{doc.get('name', 'the result')} holds no unit costs of its run and no calibration "
                         f"of its machine is recorded")
    return fallback["rows"], f"the machine's calibration ({fallback.get('name', 'calibration')}, another run)"


def serve_speeds(inputs, here_rows=None) -> dict:
    """The serving simulator's CPU-speed factors, each against the unit costs of the run its host
    costs come from (:func:`calibration_of`): ``census`` (the step census), ``inputs`` (the input
    processing), ``server_host`` (the real server's host beside the step; None without it) and
    ``here`` (the scheduler's calls measured in this run: ``here_rows`` measured now, else this
    machine's recorded calibration). ``inputs`` is a :class:`labkit.serve.inputs.ServeInputs`.
    Returns ``{role: (CpuSpeed, where)}``."""
    target = inputs.calibration_gpu_host["rows"]
    docs = {"census": inputs.census, "inputs": inputs.input_processing, "server_host": inputs.server_host}
    out = {}
    for role, doc in docs.items():
        if doc is None:
            out[role] = None
            continue
        rows, where = calibration_of(doc, inputs.calibration_census)
        if role == "inputs":
            if has_units(target, IMAGE_UNIT_COSTS) and has_units(rows, IMAGE_UNIT_COSTS):
                out[role] = (cpu_speed_from_rows(target, rows, IMAGE_UNIT_COSTS), where + "; the image path's unit cost")
                continue
            lacks = "the GPU node's host" if not has_units(target, IMAGE_UNIT_COSTS) else "this input's run"
            where += f"; the Python unit costs ({lacks} has no image-path unit cost recorded)"
        out[role] = (cpu_speed_from_rows(target, rows), where)
    if here_rows is not None:
        out["here"] = (cpu_speed_from_rows(target, here_rows), "in this run (the scheduler's calls beside it)")
    else:
        out["here"] = (cpu_speed_from_rows(target, inputs.calibration_here["rows"]),
                       "this machine's recorded calibration (another run)")
    return out


def describe_speeds(speeds: dict) -> dict:
    """``serve_speeds``' factors as the result's parameters: per role the factor, its ratios and where
    the unit costs it divides by were measured."""
    return {role: None if v is None else {**v[0].as_dict(), "calibration": v[1]} for role, v in speeds.items()}
