"""Idle gaps ("bubbles") on device streams, why they happened, and what the host was doing meanwhile.

The rules, and HTA's conventions: docs/trace-analyzer.md ("How labkit analyze works").
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

from labkit.trace.analysis.host.callsite import LAYER_NAMES, attribute_windows, label_call_sites
from labkit.trace.analysis.host.steps import STEP_NUMBER
from labkit.trace.read.columns import cat_mask, group_codes
from labkit.trace.read.load import BUSY_CATS, RUNTIME_CATS, EventTables

logger = logging.getLogger(__name__)

DEFAULT_KERNEL_WAIT_US = 30.0
CATEGORIES = ("host_wait", "kernel_wait", "other")

BUBBLE_COLUMNS = ["device", "stream", "start_us", "end_us", "dur_us", "category", "prev_op", "next_op",
                  "next_launch_us", "launch_pid", "launch_tid", "step"]
STREAM_COLUMNS = ["device", "stream", "ops_count", "span_us", "busy_us", "idle_us", "idle_host_wait_us",
                  "idle_kernel_wait_us", "idle_other_us", "idle_fraction"]
STARVATION_COLUMNS = ["call_site", *LAYER_NAMES, "idle_overlap_us", "bubble_count", "share"]


def runtime_calls(trace: EventTables) -> pd.DataFrame:
    """Host calls into the CUDA runtime/driver (``cudaLaunchKernel``, ``cudaMemcpyAsync``...), once per loaded
    trace (the device ops and the copies both read them); treat the table as read-only."""
    return trace.once("runtime_calls", lambda: _runtime_calls(trace))


def _runtime_calls(trace: EventTables) -> pd.DataFrame:
    ev = trace.events
    rt = ev[cat_mask(ev["cat"], RUNTIME_CATS)]
    out = pd.DataFrame({
        "row": rt.index.to_numpy(),
        "name": rt["name"].astype(str).to_numpy(),
        "pid": rt["pid"].to_numpy(),
        "tid": rt["tid"].to_numpy(),
        "ts_us": rt["ts_us"].to_numpy(),
        "end_us": (rt["ts_us"] + rt["dur_us"]).to_numpy(),
        "correlation": rt["correlation"].to_numpy(),
    })
    return out


def device_ops(trace: EventTables) -> pd.DataFrame:
    """Kernels, memcpys and memsets on device streams, joined to the runtime call that launched them (us)."""
    ev = trace.events
    m = cat_mask(ev["cat"], BUSY_CATS) & (ev["stream"].to_numpy() >= 0)
    d = ev[m]
    ops = pd.DataFrame({
        "row": d.index.to_numpy(),
        "device": d["device"].to_numpy(),
        "stream": d["stream"].to_numpy(),
        "cat": d["cat"].astype(str).to_numpy(),
        "name": d["name"].astype(str).to_numpy(),
        "ts_us": d["ts_us"].to_numpy(),
        "end_us": (d["ts_us"] + d["dur_us"]).to_numpy(),
        "dur_us": d["dur_us"].to_numpy(),
        "correlation": d["correlation"].to_numpy(),
        "bytes": d["bytes"].to_numpy(),
    })
    rt = runtime_calls(trace)
    rt = rt[rt["correlation"] >= 0].drop_duplicates("correlation", keep="last")
    # the launching call of each op: the last runtime call with its (non-negative) correlation id
    pos = pd.Index(rt["correlation"].to_numpy()).get_indexer(ops["correlation"].to_numpy())
    hit = pos >= 0
    at = np.where(hit, pos, 0)

    def launch(col: str, missing, dtype):
        values = rt[col].to_numpy()
        if len(values) == 0:
            return np.full(len(pos), missing, dtype=dtype)
        return np.where(hit, values[at], missing).astype(dtype)

    ops["launch_row"] = launch("row", -1, np.int64)
    ops["launch_name"] = pd.Series(launch("name", "", object), index=ops.index, dtype=object)  # object, not str
    ops["launch_pid"] = launch("pid", -1, np.int64)
    ops["launch_tid"] = launch("tid", -1, np.int64)
    ops["launch_ts_us"] = launch("ts_us", np.nan, np.float64)
    ops["launch_end_us"] = launch("end_us", np.nan, np.float64)
    return ops.sort_values(["device", "stream", "ts_us"], kind="stable").reset_index(drop=True)


def _assign_step(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Step number containing each time (-1 outside every step)."""
    if len(steps) == 0 or len(times) == 0:
        return np.full(len(times), -1, np.int64)
    st, en = steps["start_us"].to_numpy(), steps["end_us"].to_numpy()
    j = np.searchsorted(st, times, side="right") - 1
    ok = (j >= 0) & (times <= en[np.maximum(j, 0)])
    return np.where(ok, steps["step"].to_numpy()[np.maximum(j, 0)], -1)


def gaps_in_runs(ts: np.ndarray, end: np.ndarray, same: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaps (us) between ops sorted by start within contiguous groups (``same[i]``: op ``i`` is in ``i - 1``'s group).

    Returns the indices of the ops that end a gap, each op's previous end in its group (the
    running max, so overlaps close no gap; NaN at a group's start) and ``ts - prev_end``.
    """
    grp = np.cumsum(~same) - 1
    run_end = pd.Series(end).groupby(grp).cummax().to_numpy()
    prev_end = np.full(len(ts), np.nan)
    prev_end[1:] = np.where(same[1:], run_end[:-1], np.nan)
    gap = ts - prev_end
    return np.flatnonzero(gap > 0), prev_end, gap


def find_bubbles(trace: EventTables, steps: pd.DataFrame, *, ops: pd.DataFrame | None = None,
                 kernel_wait_us: float = DEFAULT_KERNEL_WAIT_US) -> pd.DataFrame:
    """Every positive idle gap on every device stream (lab convention: overlaps clipped).

    Columns: ``device``, ``stream``, ``start_us``, ``end_us``, ``dur_us``, ``category``
    (host_wait / kernel_wait / other), ``prev_op``, ``next_op``, ``next_launch_us`` (start of
    the runtime call that launched the op ending the gap; NaN if unknown), ``launch_pid``,
    ``launch_tid``, ``step`` (of ``steps``, a ``detect_steps`` table, by the launch time; -1 if none).
    """
    if kernel_wait_us < 0 or not math.isfinite(kernel_wait_us):
        raise ValueError(f"kernel_wait_us must be a finite number >= 0, got {kernel_wait_us}")
    ops = device_ops(trace) if ops is None else ops
    if len(ops) == 0:
        return pd.DataFrame({c: [] for c in BUBBLE_COLUMNS})
    dev, stm = ops["device"].to_numpy(), ops["stream"].to_numpy()
    ts, end = ops["ts_us"].to_numpy(), ops["end_us"].to_numpy()
    same = np.zeros(len(ops), bool)
    same[1:] = (dev[1:] == dev[:-1]) & (stm[1:] == stm[:-1])
    idx, prev_end, gap = gaps_in_runs(ts, end, same)
    launch = ops["launch_ts_us"].to_numpy()[idx]
    g_start, g_end, g_dur = prev_end[idx], ts[idx], gap[idx]
    host_wait = launch > g_start  # NaN compares False
    kernel_wait = ~host_wait & (g_dur < kernel_wait_us)
    category = np.where(host_wait, "host_wait", np.where(kernel_wait, "kernel_wait", "other"))
    # the op that set the running end before the gap
    names = ops["name"].to_numpy()
    prev_name = names[np.maximum(idx - 1, 0)]
    when = np.where(np.isnan(launch), g_start, launch)
    return pd.DataFrame({
        "device": dev[idx],
        "stream": stm[idx],
        "start_us": g_start,
        "end_us": g_end,
        "dur_us": g_dur,
        "category": category.astype(object),
        "prev_op": prev_name,
        "next_op": names[idx],
        "next_launch_us": launch,
        "launch_pid": ops["launch_pid"].to_numpy()[idx],
        "launch_tid": ops["launch_tid"].to_numpy()[idx],
        "step": _assign_step(when, steps),
    })


def stream_idle(ops: pd.DataFrame, bubbles: pd.DataFrame) -> pd.DataFrame:
    """Per-stream busy/idle totals (us); ``idle_us`` is the sum of the three idle categories."""
    if len(ops) == 0:
        return pd.DataFrame({c: [] for c in STREAM_COLUMNS})
    g = ops.groupby(["device", "stream"], sort=True)
    out = g.size().rename("ops_count").reset_index()
    out["first"] = g["ts_us"].min().to_numpy()
    out["last"] = g["end_us"].max().to_numpy()
    out["span_us"] = out["last"] - out["first"]
    idle = bubbles.groupby(["category", "device", "stream"])["dur_us"].sum().to_dict()  # one pass for all causes
    keys = list(zip(out["device"].tolist(), out["stream"].tolist()))
    for cat in CATEGORIES:
        out[f"idle_{cat}_us"] = [float(idle.get((cat, d, s), 0.0)) for d, s in keys]
    out["idle_us"] = out["idle_host_wait_us"] + out["idle_kernel_wait_us"] + out["idle_other_us"]
    out["busy_us"] = out["span_us"] - out["idle_us"]
    out["idle_fraction"] = np.where(out["span_us"] > 0, out["idle_us"] / out["span_us"].where(out["span_us"] > 0, 1), 0.0)
    return out[STREAM_COLUMNS]


def host_starvation(trace: EventTables, bubbles: pd.DataFrame, *, top: int | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """``(ranking, top_site)``: call sites by the host-wait idle (us) they overlap, and each bubble's top site."""
    hw = bubbles[(bubbles["category"] == "host_wait") & (bubbles["launch_tid"] >= 0)]
    empty = pd.DataFrame({c: [] for c in STARVATION_COLUMNS})
    if len(hw) == 0:
        return empty, pd.Series(dtype=object)
    windows = pd.DataFrame({"id": hw.index.to_numpy(), "pid": hw["launch_pid"].to_numpy(),
                            "tid": hw["launch_tid"].to_numpy(), "start_us": hw["start_us"].to_numpy(),
                            "end_us": hw["end_us"].to_numpy()})
    pairs = attribute_windows(trace, windows)
    pairs["call_site"] = label_call_sites(pairs)
    best = pairs.sort_values("overlap_us", ascending=False, kind="stable").drop_duplicates("id")
    top_site = best.set_index("id")["call_site"]
    # ``pairs`` has one row per (bubble, layers) and the call site follows from the layers, so a
    # group's row count is its number of distinct bubbles
    code, keys = group_codes(pairs["call_site"].to_numpy(), *(pairs[c].to_numpy() for c in LAYER_NAMES))
    rank = pd.DataFrame(keys, columns=["call_site", *LAYER_NAMES])
    rank["idle_overlap_us"] = pd.Series(pairs["overlap_us"].to_numpy()).groupby(code, sort=False).sum().to_numpy()
    rank["bubble_count"] = np.bincount(code, minlength=len(keys)).astype(np.int64)
    total = float(hw["dur_us"].sum())
    rank["share"] = rank["idle_overlap_us"] / total if total > 0 else 0.0
    rank = rank.sort_values("idle_overlap_us", ascending=False, kind="stable").reset_index(drop=True)
    if top is not None:
        rank = rank.head(top)
    return rank[STARVATION_COLUMNS], top_site


def steps_table(steps: pd.DataFrame, ops: pd.DataFrame, bubbles: pd.DataFrame) -> pd.DataFrame:
    """Per step: host span, ops launched, device busy time of those ops and idle by category (us)."""
    if len(steps) == 0:
        return pd.DataFrame({c: [] for c in ["step", "name", "start_us", "dur_us", "ops_count", "device_busy_us",
                                             "idle_us", "idle_host_wait_us", "idle_kernel_wait_us", "idle_other_us"]})
    out = steps[["step", "name", "start_us", "dur_us"]].copy()
    when = ops["launch_ts_us"].to_numpy()
    when = np.where(np.isnan(when), ops["ts_us"].to_numpy(), when)
    s = _assign_step(when, steps)
    c = pd.Series(ops["dur_us"].to_numpy()).groupby(s)
    out["ops_count"] = out["step"].map(c.size()).fillna(0).astype(np.int64)
    out["device_busy_us"] = out["step"].map(c.sum()).fillna(0.0)
    idle = bubbles.groupby(["category", "step"])["dur_us"].sum().to_dict()  # one pass for all causes
    step_l = out["step"].tolist()
    for cat in CATEGORIES:
        out[f"idle_{cat}_us"] = np.array([idle.get((cat, k), 0.0) for k in step_l], dtype=np.float64)
    out["idle_us"] = out["idle_host_wait_us"] + out["idle_kernel_wait_us"] + out["idle_other_us"]
    return out[["step", "name", "start_us", "dur_us", "ops_count", "device_busy_us", "idle_us",
                "idle_host_wait_us", "idle_kernel_wait_us", "idle_other_us"]]


# --------------------------------------------------------------------------------------------
# HTA-compatible idle breakdown
# --------------------------------------------------------------------------------------------

_HTA_KERNEL_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events")
_HTA_SYNC_NAMES = ("Event Sync", "Context Sync")


def hta_idle_breakdown(trace: EventTables, *, consecutive_kernel_delay: float = 30,
                       include_last_profiler_step: bool = False) -> pd.DataFrame:
    """Idle time per stream and category exactly as HTA's ``get_idle_time_breakdown`` counts it.

    Returns ``stream``, ``idle_category`` (host_wait / kernel_wait / other), ``idle_time``
    (us, signed gaps summed, rounded to 0.01 like HTA) for every stream with device work.
    ``consecutive_kernel_delay`` is compared with microsecond gaps (docs/reference.md).
    """
    ev = trace.events
    n = len(ev)
    cols = {"stream", "idle_category", "idle_time"}
    if n == 0:
        return pd.DataFrame({c: [] for c in sorted(cols)})
    ts = ev["ts_us"].to_numpy()
    dur = ev["dur_us"].to_numpy()
    if trace.stats.ts_float or trace.stats.ts_missing:  # HTA rounds float-timestamp traces
        end = np.floor(ts + dur)
        ts = np.ceil(ts)
    else:
        end = ts + dur
    stream = ev["stream"].to_numpy()
    corr = ev["correlation"].to_numpy()
    names = ev["name"]
    is_sync = cat_mask(names, _HTA_SYNC_NAMES)
    is_gpu = ((stream >= 0) & (corr >= 0)) | is_sync
    is_cpu = ~is_gpu
    index = ev["index"].to_numpy()

    # runtime event for every GPU event: the last CPU event (file order) with its correlation
    cpu_pos = np.flatnonzero(is_cpu & (corr != -1))
    last_cpu_for_corr = pd.Series(cpu_pos, index=corr[cpu_pos])
    last_cpu_for_corr = last_cpu_for_corr[~last_cpu_for_corr.index.duplicated(keep="last")]

    kept = np.ones(n, bool)
    mult = np.ones(n, np.int64)
    step_names = [c for c in names.cat.categories if STEP_NUMBER.match(str(c))]
    if len(step_names) >= 2:
        is_step = cat_mask(names, step_names) & is_cpu
        if is_step.any():
            last_start, last_end = ts[is_step].max(), end[is_step].max()
        else:
            last_start, last_end = ts[is_cpu].min(), end[is_cpu].max()
        cpu_kept = is_cpu & ((ts <= last_end) if include_last_profiler_step else (ts < last_start))
        counts = pd.Series(corr[cpu_kept]).value_counts()
        mult = np.where(is_gpu, pd.Series(corr).map(counts).fillna(0).to_numpy().astype(np.int64), 1)
        kept = cpu_kept | (is_gpu & (mult > 0))

    sel = kept & (stream != -1) & cat_mask(ev["cat"], _HTA_KERNEL_CATS)
    rows = np.flatnonzero(sel)
    rows = np.repeat(rows, mult[rows])
    # ts of the launching event; unmatched GPU events point at label min(corr, 0) like HTA does
    rt_pos = pd.Series(corr[rows]).map(last_cpu_for_corr).to_numpy()
    low = np.flatnonzero(index <= 0)  # the labels a fallback (<= 0) can name
    pos_of_index = pd.Series(low, index=index[low])
    fallback = np.minimum(corr[rows], 0)
    fb_pos = pd.Series(fallback).map(pos_of_index[~pos_of_index.index.duplicated()]).to_numpy()
    rt = np.where(np.isnan(rt_pos), fb_pos, rt_pos)
    ts_runtime = np.full(len(rows), np.nan)
    ok = ~np.isnan(rt)
    rt_i = rt[ok].astype(np.int64)
    ts_runtime[ok] = np.where(kept[rt_i], ts[rt_i], np.nan)

    out = []
    s_rows = stream[rows]
    for st in pd.unique(s_rows):
        m = s_rows == st
        r = rows[m]
        order = np.argsort(ts[r], kind="stable")
        r = r[order]
        t_rt = ts_runtime[m][order]
        st_ts, st_end = ts[r], end[r]
        prev_end = np.concatenate([[np.nan], st_end[:-1]])
        interval = st_ts - prev_end
        hw = t_rt > prev_end
        kw = ~hw & (interval < consecutive_kernel_delay)
        for cat, mask in (("host_wait", hw), ("kernel_wait", kw), ("other", ~hw & ~kw)):
            out.append({"stream": int(st), "idle_category": cat, "idle_time": round(float(np.nansum(interval[mask])), 2)})
    return pd.DataFrame(out, columns=["stream", "idle_category", "idle_time"])


def hta_idle_totals(breakdown: pd.DataFrame) -> dict:
    """``{stream: total idle us}`` from an ``hta_idle_breakdown`` (or HTA's own) table."""
    return {int(k): float(v) for k, v in breakdown.groupby("stream")["idle_time"].sum().items()}
