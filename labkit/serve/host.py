"""The engine core's host chain per arm, counted in the unit costs it is made of, and priced on another host.

More: docs/reference.md, ``labkit.serve.host``.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.errors import UsageError
from labkit.results import IN_RUN_KEY

__all__ = ["READ", "LOOP", "UnitCosts", "Counts", "Chains", "chains_from_census", "infer_read_ns", "measured_units"]

READ, LOOP = "tensor_index_int", "loop_only"
#: the census phases the engine core's thread runs one after another
CORE_PHASES = ("schedule", "prepare_inputs", "encoder", "forward", "sample", "update_from_output", "other")
API_PHASE = "process_outputs"
#: the arm whose chain holds no tensor reads but the same loop as the baseline
REFERENCE = "pr40143"


@dataclass(frozen=True)
class UnitCosts:
    """One host's cost of a torch tensor read + ``int()`` and of one Python loop iteration (ns)."""

    read_ns: float
    loop_ns: float
    where: str

    @classmethod
    def from_rows(cls, rows, where: str) -> "UnitCosts":
        by = {r.get("variant"): r.get("median_ns") for r in rows or ()}
        if not all(isinstance(by.get(u), (int, float)) and by[u] > 0 for u in (READ, LOOP)):
            raise UsageError(f"{where} holds no {READ} and {LOOP} unit costs (record them with labkit calibrate)")
        return cls(float(by[READ]), float(by[LOOP]), where)


@dataclass(frozen=True)
class Counts:
    """One arm's step at one shape in unit costs: the core's tensor reads and loop units, the API
    server's loop units (its output processing)."""

    reads: float
    loops: float
    api_loops: float

    def core_ns(self, units: UnitCosts) -> float:
        return self.reads * units.read_ns + self.loops * units.loop_ns


def _lerp(points: list, x: float) -> Counts:
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return points[0][1]
    if x >= xs[-1]:
        return points[-1][1]
    i = bisect.bisect_right(xs, x)
    (x0, a), (x1, b) = points[i - 1], points[i]
    w = (x - x0) / (x1 - x0)
    return Counts(*(u + (v - u) * w for u, v in zip(asdict(a).values(), asdict(b).values())))


@dataclass(frozen=True)
class Chains:
    """Per arm, ``(requests, Counts)`` at the census's points (``images`` per request); linear
    between them, flat beyond."""

    images: int
    points: dict
    clipped: tuple = ()  #: points where the baseline's excess was negative (counted as no reads)

    def counts(self, arm: str, requests: float) -> Counts:
        try:
            return _lerp(self.points[arm], max(1.0, requests))
        except KeyError:
            raise UsageError(f"the census holds no arm {arm!r} (it has {', '.join(self.points)})") from None

    def core_ns(self, arm: str, requests: float, units: UnitCosts) -> float:
        return self.counts(arm, requests).core_ns(units)


def chains_from_census(doc: dict, arms, images: int = 32) -> Chains:
    """:class:`Chains` of ``arms`` from a ``vllm_step`` result (its ``off_host:<phase>`` rows and its
    per-point ``calibration_in_run``); ``UsageError`` naming what is missing."""
    phases: dict = {}
    for r in doc.get("rows", []):
        ph = str(r.get("phase", ""))
        if r.get("images") == images and ph.startswith("off_host:") and r.get("median_us") is not None:
            phases.setdefault((r["variant"], r["num_requests"]), {})[ph.split(":", 1)[1]] = float(r["median_us"]) * 1e3
    in_run = (doc.get("params") or {}).get(IN_RUN_KEY)
    if not isinstance(in_run, dict):
        raise UsageError("the census keeps no unit costs of its own run (params.calibration_in_run): record it "
                         "again with labkit bench vllm-step")
    need = list(dict.fromkeys([REFERENCE, *arms]))
    points: dict = {a: [] for a in need}
    clipped = []
    for n in sorted({n for (_, n) in phases}):
        have = {a: phases.get((a, n)) for a in need}
        if any(v is None or any(p not in v for p in CORE_PHASES + (API_PHASE,)) for v in have.values()):
            continue
        units = UnitCosts.from_rows(in_run.get(f"{n}x{images}"), f"the census's unit costs at {n}x{images}")
        core = {a: sum(v[p] for p in CORE_PHASES) for a, v in have.items()}
        for a, v in have.items():
            reads, loops = 0.0, core[a] / units.loop_ns
            if a == "baseline":
                excess = core[a] - core[REFERENCE]
                if excess < 0:
                    clipped.append(n)
                reads, loops = max(0.0, excess) / units.read_ns, core[REFERENCE] / units.loop_ns
            points[a].append((n, Counts(reads, loops, v[API_PHASE] / units.loop_ns)))
    if not all(points.values()):
        raise UsageError(f"the census has no point with every phase of {', '.join(need)} at {images} images per request")
    return Chains(images, {a: points[a] for a in need}, tuple(clipped))


def infer_read_ns(chains: Chains, *, host_ns: float, requests: int, loop_ns: float) -> dict:
    """The PR host's cost per tensor read from the baseline's host side at its peak (``host_ns`` at
    ``requests`` running): ``(host - loops x loop_ns) / reads``."""
    c = chains.counts("baseline", requests)
    if c.reads <= 0:
        raise UsageError("the census shows no tensor reads in the baseline's chain: nothing to infer")
    read = (host_ns - c.loops * loop_ns) / c.reads
    if read <= 0:
        raise UsageError("the baseline's peak step is shorter than its chain's loop part alone")
    return {"read_ns": read, "reads": c.reads, "loops": c.loops, "loop_ns": loop_ns, "host_ns": host_ns}


def measured_units(root) -> list[dict]:
    """Every unit-cost measurement the results store holds: per machine and result, the tensor read
    and loop costs (``labkit calibrate``'s rows and each result's own-run ones; a result measured
    at several points gives one entry per point)."""
    out = []
    for path in sorted(Path(root).glob("*/*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        kept = (doc.get("params") or {}).get(IN_RUN_KEY)
        sets = [(doc.get("rows"), "calibrate")] if path.stem.startswith("calibration") else []
        if isinstance(kept, dict):
            sets += [(rows, f"in its run at {k}") for k, rows in kept.items()]
        elif kept:
            sets.append((kept, "in its run"))
        for rows, where in sets:
            try:
                u = UnitCosts.from_rows(rows, where)
            except UsageError:
                continue
            out.append({"machine": path.parent.name, "result": path.stem, "where": where, "read_ns": u.read_ns,
                        "loop_ns": u.loop_ns, "created": doc.get("created")})
    return out
