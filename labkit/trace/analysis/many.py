"""Many traces at once (a vLLM profile folder: one trace per engine-core process and rank), then a combined view.

Keys: docs/analyze-json.md ("Several traces").
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import resource
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from functools import cached_property
from pathlib import Path

import pandas as pd

from labkit.errors import UsageError
from labkit.trace.analysis.trace import Trace

logger = logging.getLogger(__name__)

#: a rank is a straggler when its step time exceeds the median over ranks by more than this fraction
STRAGGLER_FRAC = 0.10
#: a step's idle columns (``labkit analyze``'s steps table) reported for its slowest rank
IDLE_COLUMNS = ("idle_us", "idle_host_wait_us", "idle_kernel_wait_us", "idle_other_us")
TRACE_SUFFIXES = (".json", ".json.gz")


def expand_paths(paths: list[str]) -> list[Path]:
    """Trace files named by ``paths`` (a folder: its ``*.json``/``*.json.gz``), once each; ``UsageError`` if none."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise UsageError(f"no *.json or *.json.gz trace below folder {str(p)!r}")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise UsageError(f"no such trace file: {p}")
    seen: set = set()
    return [p for p in out if not (p.resolve() in seen or seen.add(p.resolve()))]


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS counter (Linux ``clear_refs``); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes(reset_ok: bool) -> int:
    if reset_ok:
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def analyze_one(path: str, options: dict | None = None, top: int = 10) -> dict:
    """Analyse one trace file in this process: ``{"trace", "json", "lines", "step_sites", "peak_rss_bytes",
    "wall_s"}``. ``options``: keyword arguments of ``Trace``. ``peak_rss_bytes`` is this process's
    peak resident memory while it analysed the trace (reset before it where Linux allows)."""
    reset_ok = _reset_peak_rss()
    t0 = time.perf_counter()
    try:
        an = Trace(path, **(options or {}))
    except UsageError as exc:  # name the file: with many traces the message alone does not say which
        name = Path(path).name
        raise UsageError(str(exc) if name in str(exc) else f"{name}: {exc}") from None
    doc = an.to_json(top=top)
    lines = an.summary_lines(top=min(top, 10))
    sites = step_call_sites(an)
    del an
    return {"trace": str(path), "json": doc, "lines": lines, "step_sites": sites,
            "peak_rss_bytes": _peak_rss_bytes(reset_ok),
            "wall_s": time.perf_counter() - t0, "peak_rss_reset": reset_ok}


STEP_SITES = 3  #: host-wait call sites kept per step for the combined view


def step_call_sites(an: Trace, top: int = STEP_SITES) -> dict:
    """Per step (its index): the call sites the launching thread was in during the step's host-wait idle,
    largest first: ``[{"call_site", "idle_us"}]`` (each bubble counted at its top call site)."""
    b = an.bubbles()
    b = b[(b["category"] == "host_wait") & (b["step"] >= 0)]
    if not len(b):
        return {}
    g = b.groupby(["step", "call_site"], sort=False)["dur_us"].sum().reset_index()
    g = g.sort_values(["step", "dur_us"], ascending=[True, False], kind="stable")
    return {int(k): [{"call_site": r.call_site, "idle_us": float(r.dur_us)} for r in part.head(top).itertuples()]
            for k, part in g.groupby("step", sort=True)}


def _run_local(paths: list[str], options: dict, top: int, jobs: int) -> list[dict]:
    if jobs <= 1 or len(paths) == 1:
        return [analyze_one(p, {**options, "jobs": jobs}, top) for p in paths]

    # spawn: workers start clean (no copy of the coordinator's memory) and the same on every OS
    with ProcessPoolExecutor(max_workers=min(jobs, len(paths)), mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(analyze_one, p, options, top) for p in paths]
        return [f.result() for f in futures]


DASK_CONNECT_TIMEOUT_S = 10  #: how long ``--dask`` waits for the scheduler before it gives up


def _run_dask(paths: list[str], options: dict, top: int, address: str) -> list[dict]:
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--dask needs dask distributed, which is not installed (pip install 'labkit[scale]')") from None
    try:
        client = Client(address, timeout=f"{DASK_CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {address!r}: {exc}") from None
    try:
        futures = client.map(analyze_one, paths, options=options, top=top, pure=False)
        return client.gather(futures)
    finally:
        client.close()


class TraceSet:
    """Several traces or a profile folder (``expand_paths``), one ``Trace`` each on ``jobs`` local
    processes (default: the core count) or on the Dask cluster at ``dask_address``, then lined up.

    ``records`` (``analyze_one``'s, in the order given; a bad trace raises its ``UsageError``) and
    ``combined`` (``combine``'s view) are computed on first use; ``per_rank()``, ``per_step()`` and
    ``stragglers()`` are its tables. ``options``: keyword arguments of ``Trace``."""

    def __init__(self, paths, *, jobs: int | None = None, dask_address: str | None = None, top: int = 10,
                 **options) -> None:
        self.paths = expand_paths([paths] if isinstance(paths, (str, os.PathLike)) else list(paths))
        self.jobs, self.dask_address, self.top, self.options = jobs, dask_address, top, options

    @cached_property
    def records(self) -> list[dict]:
        paths = [str(p) for p in self.paths]
        if self.dask_address:
            return _run_dask(paths, self.options, self.top, self.dask_address)
        return _run_local(paths, self.options, self.top, self.jobs or os.cpu_count() or 1)

    @cached_property
    def combined(self) -> dict:
        return combine(self.records)

    def per_rank(self) -> pd.DataFrame:
        return pd.DataFrame(self.combined["per_rank"])

    def per_step(self) -> pd.DataFrame:
        return pd.DataFrame(self.combined["per_step"])

    def stragglers(self) -> pd.DataFrame:
        return pd.DataFrame(self.combined["stragglers"])

    def to_json(self) -> dict:
        """``labkit analyze``'s document: one trace's, or ``{"traces": [...], "combined": {...}}``."""
        if len(self.records) == 1:
            return self.records[0]["json"]
        return {"traces": [{"trace": r["trace"], **r["json"]} for r in self.records], "combined": self.combined}

    def summary_lines(self) -> list[str]:
        lines = [line for r in self.records for line in (*r["lines"], "")]
        return lines + (combined_lines(self.combined) if len(self.records) > 1 else [])


def _rank_label(rec: dict, i: int):
    rank = rec["json"]["source"].get("rank")
    return rank if isinstance(rank, int) else None


def combine(records: list[dict]) -> dict:
    """The cross-rank view of several ``analyze_one`` records (docs/reference.md)."""
    per_rank = []
    step_durs: dict[int, list[tuple[float, int, dict]]] = {}
    for i, rec in enumerate(records):
        doc = rec["json"]
        s = doc["summary"]
        devices = doc.get("devices") or []
        if devices:  # real gaps only: a device is idle when none of its streams runs anything
            busy = float(sum(d["busy_us"] or 0.0 for d in devices))
            idle = float(sum(d["idle_us"] or 0.0 for d in devices))
        else:
            busy, idle = float(s.get("busy_us") or 0.0), float(s.get("idle_us") or 0.0)
        steps = doc.get("steps") or []
        step_total = float(sum(st.get("dur_us") or 0.0 for st in steps))
        per_rank.append({"index": i, "trace": rec["trace"], "rank": _rank_label(rec, i),
                         "busy_us": busy, "idle_us": idle,
                         "idle_fraction": idle / (busy + idle) if busy + idle > 0 else 0.0,
                         "steps_count": len(steps), "step_total_us": step_total,
                         "peak_rss_bytes": int(rec.get("peak_rss_bytes") or 0)})
        sites = rec.get("step_sites") or {}
        for st in steps:
            st = {**st, "call_sites": sites.get(int(st["step"]), [])}
            step_durs.setdefault(int(st["step"]), []).append((float(st.get("dur_us") or 0.0), i, st))
    per_step = []
    slowest_count: dict[int, int] = {}
    for k in sorted(step_durs):
        durs = step_durs[k]
        if len(durs) < 2:
            continue
        d_max, i_max, slow = max(durs, key=lambda x: (x[0], x[1]))
        d_min = min(d for d, _, _ in durs)
        slowest_count[i_max] = slowest_count.get(i_max, 0) + 1
        per_step.append({"step": k, "ranks_count": len(durs), "slowest_index": i_max,
                         "slowest_rank": per_rank[i_max]["rank"], "max_dur_us": d_max, "min_dur_us": d_min,
                         "spread_us": d_max - d_min, "slowest_name": slow["name"],
                         **{f"slowest_{c}": float(slow.get(c) or 0.0) for c in IDLE_COLUMNS},
                         "slowest_call_sites": slow["call_sites"]})
    use_steps = any(r["steps_count"] for r in per_rank)
    ranked = [r for r in per_rank if r["steps_count"]] if use_steps else per_rank
    values = [r["step_total_us"] if use_steps else r["busy_us"] + r["idle_us"] for r in ranked]
    stragglers = []
    if len(values) >= 2:
        med = statistics.median(values)
        for r, v in zip(ranked, values):
            if med > 0 and v > med * (1 + STRAGGLER_FRAC):
                stragglers.append({"index": r["index"], "rank": r["rank"], "trace": r["trace"], "time_us": v,
                                   "over_median": v / med - 1, "slowest_steps_count": slowest_count.get(r["index"], 0)})
    return {"traces_count": len(records), "measure": "step time" if use_steps else "device span",
            "straggler_frac": STRAGGLER_FRAC, "per_rank": per_rank, "per_step": per_step, "stragglers": stragglers}


def combined_lines(comb: dict) -> list[str]:
    """A short table of the combined view (for the CLI)."""
    out = [f"combined: {comb['traces_count']} traces (stragglers by {comb['measure']}, "
           f"> {100 * comb['straggler_frac']:.0f}% over the median)"]
    out.append(f"{'rank':>5} {'busy_ms':>10} {'idle_ms':>10} {'idle%':>6} {'steps':>6} {'step_ms':>10} "
               f"{'peak_MB':>8}  trace")
    for r in comb["per_rank"]:
        rank = "-" if r["rank"] is None else r["rank"]
        out.append(f"{rank:>5} {r['busy_us'] / 1e3:>10.3f} {r['idle_us'] / 1e3:>10.3f} {100 * r['idle_fraction']:>6.1f} "
                   f"{r['steps_count']:>6} {r['step_total_us'] / 1e3:>10.3f} {r['peak_rss_bytes'] / 1e6:>8.1f}  "
                   f"{Path(r['trace']).name}")
    if comb["per_step"]:
        slow = {}
        for s in comb["per_step"]:
            slow[s["slowest_index"]] = slow.get(s["slowest_index"], 0) + 1
        parts = [f"{Path(comb['per_rank'][i]['trace']).name}: {n}" for i, n in sorted(slow.items())]
        out.append("slowest in how many steps: " + ", ".join(parts))
        out.append("per step (the n-th step marker of each trace): the slowest rank, its idle and where its host was")
        out.append(f"{'step':>8} {'rank':>5} {'max_ms':>9} {'spread_ms':>9} {'idle_ms':>9} {'host_wait':>9}  call sites")
        for s in comb["per_step"]:
            rank = "-" if s["slowest_rank"] is None else s["slowest_rank"]
            sites = "; ".join(f"{c['call_site'][:48]} {c['idle_us'] / 1e3:.3f}" for c in s["slowest_call_sites"])
            out.append(f"{s['step']:>8} {rank:>5} {s['max_dur_us'] / 1e3:>9.3f} {s['spread_us'] / 1e3:>9.3f} "
                       f"{s['slowest_idle_us'] / 1e3:>9.3f} {s['slowest_idle_host_wait_us'] / 1e3:>9.3f}  {sites}")
    for s in comb["stragglers"]:
        out.append(f"STRAGGLER {Path(s['trace']).name} (rank {s['rank']}): {100 * s['over_median']:.1f}% over the median")
    return out
