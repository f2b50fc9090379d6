"""Host-to-device copies: pageable vs pinned, what they cost the host, and who issued them.

The rules: docs/trace-analyzer.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.trace.analysis.device.bubbles import _assign_step, runtime_calls
from labkit.trace.analysis.host.callsite import (LAYER_NAMES, call_site_label, innermost_at, merge_windows, thread_rows,
                                                 thread_segments)
from labkit.trace.read.columns import group_codes
from labkit.trace.read.load import EventTables

SMALL_BYTES = 64 * 1024
MIN_COUNT = 4
SYNC_GAP_US = 50.0

_MEMCPY = re.compile(r"Memcpy\s+(\w+)\s*(?:\(([^)]*)\))?")

COPY_COLUMNS = ["device", "stream", "direction", "kind", "bytes", "ts_us", "dur_us", "step", "launch_name",
                "host_call_us", "sync_name", "sync_us", "host_stall_us", "call_site", *LAYER_NAMES]


def classify_copy(name: str) -> tuple[str, str]:
    """``(direction, kind)`` from a Kineto memcpy name, e.g. ``("HtoD", "pageable")``; else ``"unknown"``."""
    m = _MEMCPY.search(name)
    if not m:
        return "unknown", "unknown"
    direction = m.group(1)
    detail = (m.group(2) or "").lower()
    src = detail.split("->")[0]
    dst = detail.split("->")[-1]
    side = dst if direction == "DtoH" else src
    if "pageable" in side:
        kind = "pageable"
    elif "pinned" in side:
        kind = "pinned"
    elif "device" in side:
        kind = "device"
    else:
        kind = "unknown"
    return direction, kind


@dataclass
class CopyReport:
    """Copies table plus per-step and per-call-site counts and the small-pageable flags."""

    copies: pd.DataFrame
    by_step: pd.DataFrame
    by_call_site: pd.DataFrame
    flags: list

    @property
    def h2d(self) -> pd.DataFrame:
        return self.copies[self.copies["direction"] == "HtoD"]


def find_copies(trace: EventTables, ops: pd.DataFrame, steps: pd.DataFrame, *, sync_gap_us: float = SYNC_GAP_US) -> pd.DataFrame:
    """One row per memcpy with direction, kind, bytes, host stall (us) and call site (see module doc)."""
    cp = ops[ops["cat"].isin(["gpu_memcpy", "Memcpy"])].reset_index(drop=True)
    if len(cp) == 0:
        return pd.DataFrame({c: [] for c in COPY_COLUMNS})
    dk = [classify_copy(n) for n in cp["name"]]
    out = pd.DataFrame({
        "device": cp["device"].to_numpy(),
        "stream": cp["stream"].to_numpy(),
        "direction": [d for d, _ in dk],
        "kind": [k for _, k in dk],
        "bytes": cp["bytes"].to_numpy(),
        "ts_us": cp["ts_us"].to_numpy(),
        "dur_us": cp["dur_us"].to_numpy(),
        "launch_name": cp["launch_name"].to_numpy(),
        "host_call_us": (cp["launch_end_us"] - cp["launch_ts_us"]).to_numpy(),
    })
    when = cp["launch_ts_us"].to_numpy()
    out["step"] = _assign_step(np.where(np.isnan(when), cp["ts_us"].to_numpy(), when), steps)
    # the runtime call right after each copy's call on the same thread
    rt = runtime_calls(trace).sort_values(["pid", "tid", "ts_us"], kind="stable").reset_index(drop=True)
    sync_name = np.full(len(cp), "", dtype=object)
    sync_us = np.zeros(len(cp))
    layers = {k: np.full(len(cp), "", dtype=object) for k in LAYER_NAMES}
    launched = cp["launch_tid"].to_numpy() >= 0
    for (pid, tid), grp in cp[launched].groupby(["launch_pid", "launch_tid"], sort=False):
        r = rt[(rt["pid"].to_numpy() == pid) & (rt["tid"].to_numpy() == tid)]
        starts = r["ts_us"].to_numpy()
        pos = np.searchsorted(starts, grp["launch_ts_us"].to_numpy(), side="right")
        nxt = np.minimum(pos, max(len(r) - 1, 0))
        has = (pos < len(r)) & (len(r) > 0)
        if len(r):
            nm = r["name"].to_numpy()[nxt]
            gap = starts[nxt] - grp["launch_end_us"].to_numpy()
            is_sync = has & np.array(["Synchronize" in x for x in nm], bool) & (gap <= sync_gap_us)
            idx = grp.index.to_numpy()
            sync_name[idx[is_sync]] = nm[is_sync]
            sync_us[idx[is_sync]] = (r["end_us"].to_numpy() - starts)[nxt][is_sync]
        t = grp["launch_ts_us"].to_numpy()
        ws, we = merge_windows(t, t)
        seg = thread_segments(trace, thread_rows(trace, pid, tid), ws, we)
        lab = innermost_at(seg, t)
        for k in LAYER_NAMES:
            layers[k][grp.index.to_numpy()] = lab[k]
    out["sync_name"] = sync_name
    out["sync_us"] = sync_us
    out["host_stall_us"] = np.nan_to_num(out["host_call_us"].to_numpy()) + sync_us
    for k in LAYER_NAMES:
        out[k] = layers[k]
    out["call_site"] = [call_site_label(a, p, c, "") for a, p, c in zip(out["annotation"], out["python_frame"], out["cpu_op"])]
    return out[COPY_COLUMNS]


def copy_report(trace: EventTables, ops: pd.DataFrame, steps: pd.DataFrame, *, small_bytes: int = SMALL_BYTES,
                min_count: int = MIN_COUNT, sync_gap_us: float = SYNC_GAP_US) -> CopyReport:
    """Copies with per-step and per-call-site counts, and flags for repeated small pageable H2D copies."""
    if small_bytes < 0 or min_count < 1:
        raise ValueError("small_bytes must be >= 0 and min_count >= 1")
    copies = find_copies(trace, ops, steps, sync_gap_us=sync_gap_us)
    h2d = copies[copies["direction"] == "HtoD"]
    small_pg = (h2d["kind"] == "pageable") & (h2d["bytes"] <= small_bytes) & (h2d["bytes"] >= 0)
    kind, nbytes, stall = h2d["kind"].to_numpy(), h2d["bytes"].to_numpy(), h2d["host_stall_us"].to_numpy()
    small = small_pg.to_numpy().astype(np.int64)
    # grouped once, summed column by column as pandas' ``groupby(...).agg`` does (same sums, far less overhead)
    code, keys = group_codes(h2d["step"].tolist(), sort=True)
    sums = pd.DataFrame({"pageable": (kind == "pageable").astype(np.int64), "pinned": (kind == "pinned").astype(np.int64),
                         "small": small, "bytes": nbytes, "stall": stall}).groupby(code, sort=True).sum()
    by_step = pd.DataFrame({"step": np.array([k for k, in keys], dtype=h2d["step"].dtype),
                            "h2d_count": np.bincount(code, minlength=len(keys)).astype(np.int64),
                            "pageable_count": sums["pageable"].to_numpy(), "pinned_count": sums["pinned"].to_numpy(),
                            "small_pageable_count": sums["small"].to_numpy(), "h2d_bytes": sums["bytes"].to_numpy(),
                            "host_stall_us": sums["stall"].to_numpy()})
    code, keys = group_codes(h2d["call_site"].tolist(), kind.tolist(), sort=True)
    sums = pd.DataFrame({"bytes": nbytes, "small": small, "stall": stall}).groupby(code, sort=True).sum()
    by_site = pd.DataFrame({"call_site": pd.array([s for s, _ in keys], dtype=h2d["call_site"].dtype),
                            "kind": pd.array([k for _, k in keys], dtype=h2d["kind"].dtype),
                            "count": np.bincount(code, minlength=len(keys)).astype(np.int64),
                            "bytes": sums["bytes"].to_numpy(), "small_pageable_count": sums["small"].to_numpy(),
                            "host_stall_us": sums["stall"].to_numpy()}) \
        .sort_values(["host_stall_us", "count"], ascending=False, kind="stable")
    flags = []
    sp = h2d[small_pg]
    if len(sp):
        per = sp.groupby(["call_site", "step"]).agg(count=("bytes", "size"), bytes=("bytes", "sum"),
                                                     host_stall_us=("host_stall_us", "sum")).reset_index()
        hit = per[per["count"] >= min_count]
        for site, g in hit.groupby("call_site", sort=False):
            flags.append({
                "call_site": site,
                "steps_flagged": int(len(g)),
                "max_per_step": int(g["count"].max()),
                "count": int(g["count"].sum()),
                "bytes": int(g["bytes"].sum()),
                "host_stall_us": float(g["host_stall_us"].sum()),
                "rule": f">= {min_count} pageable HtoD copies of <= {small_bytes} bytes in one step",
            })
        flags.sort(key=lambda f: -f["host_stall_us"])
    return CopyReport(copies=copies, by_step=by_step.reset_index(drop=True),
                      by_call_site=by_site.reset_index(drop=True), flags=flags)
