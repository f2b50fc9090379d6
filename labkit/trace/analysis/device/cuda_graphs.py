"""CUDA-graph replays as units, and device idle that counts only real gaps.

Why: docs/trace-analyzer.md ("CUDA graphs").
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from labkit.trace.analysis.device.bubbles import gaps_in_runs
from labkit.trace.read.columns import cat_mask
from labkit.trace.read.load import EventTables

GRAPH_LAUNCH = re.compile(r"^(cuda|cu|hip)GraphLaunch(_v\d+)?$")
GAP_CATEGORIES = ("host_wait", "kernel_wait", "other", "unrecorded")

REPLAY_COLUMNS = ["replay", "launch_row", "name", "pid", "tid", "correlation", "launch_ts_us", "launch_end_us",
                  "device", "streams", "ops_count", "first_ts_us", "last_end_us", "span_us", "busy_us", "gaps_us",
                  "launch_to_start_us", "recorded"]
GAP_COLUMNS = ["device", "start_us", "end_us", "dur_us", "category", "next_op", "replay"]
DEVICE_COLUMNS = ["device", "streams_count", "ops_count", "span_us", "busy_us", "idle_us", "idle_host_wait_us",
                  "idle_kernel_wait_us", "idle_other_us", "unrecorded_us", "idle_fraction",
                  "per_stream_idle_sum_us"]


def graph_launches(trace: EventTables) -> pd.DataFrame:
    """Host calls that launch a CUDA/HIP graph: ``row``, ``name``, ``pid``, ``tid``, ``ts_us``,
    ``end_us``, ``correlation``; sorted by start."""
    ev = trace.events
    names = ev["name"]
    cats = names.cat.categories if hasattr(names, "cat") else pd.Index(pd.unique(names.astype(str)))
    wanted = [c for c in cats if GRAPH_LAUNCH.match(str(c))]
    g = ev[cat_mask(names, wanted)]
    return pd.DataFrame({
        "row": g.index.to_numpy(), "name": g["name"].astype(str).to_numpy(), "pid": g["pid"].to_numpy(),
        "tid": g["tid"].to_numpy(), "ts_us": g["ts_us"].to_numpy(), "end_us": (g["ts_us"] + g["dur_us"]).to_numpy(),
        "correlation": g["correlation"].to_numpy(),
    }).sort_values("ts_us", kind="stable").reset_index(drop=True)


def replay_index(ops: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """For each device op (``device_ops`` table), the row of ``launches`` (``graph_launches`` or
    ``graph_replays``, whose rows are in the same order) it belongs to (-1: none)."""
    if len(launches) == 0 or len(ops) == 0:
        return np.full(len(ops), -1, np.int64)
    corr = launches["correlation"].to_numpy()
    ok = corr >= 0
    lookup = pd.Series(np.flatnonzero(ok), index=corr[ok])
    lookup = lookup[~lookup.index.duplicated(keep="last")]
    out = pd.Series(ops["correlation"].to_numpy()).map(lookup).to_numpy()
    return np.where(np.isnan(out), -1, out).astype(np.int64)


def graph_replays(trace: EventTables, ops: pd.DataFrame) -> pd.DataFrame:
    """One row per graph launch with its recorded device ops (``REPLAY_COLUMNS``; times in us)."""
    launches = graph_launches(trace)
    if len(launches) == 0:
        return pd.DataFrame({c: [] for c in REPLAY_COLUMNS})
    idx = replay_index(ops, launches)
    mine = idx >= 0
    ts, end = ops["ts_us"].to_numpy()[mine], ops["end_us"].to_numpy()[mine]
    dev, stm, r = ops["device"].to_numpy()[mine], ops["stream"].to_numpy()[mine], idx[mine]
    n = len(launches)
    count = np.bincount(r, minlength=n)
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    busy = np.zeros(n)
    device = np.full(n, -1, np.int64)
    streams = [""] * n
    has = np.flatnonzero(count)
    if len(has):
        # busy = union of a replay's ops, for all replays at once: ops by start (stable) within a replay,
        # the running end, and the gaps between a start and the running end before it summed per replay
        order = np.lexsort((ts, r))
        rs, s, e = r[order], ts[order], end[order]
        head = np.searchsorted(rs, has)  # each replay's first op in ``order``
        first[has] = np.minimum.reduceat(s, head)
        last[has] = np.maximum.reduceat(e, head)
        run_end = pd.Series(e).groupby(rs).cummax().to_numpy()
        inner = rs[1:] == rs[:-1]
        gaps = np.clip((s[1:] - run_end[:-1])[inner], 0, None)
        multi = has[count[has] > 1]
        gap_sum = np.zeros(n)
        if len(multi):
            gap_sum[multi] = np.add.reduceat(gaps, np.cumsum(count[multi] - 1) - (count[multi] - 1))
        busy[has] = last[has] - first[has] - gap_sum[has]
        by_r = np.argsort(r, kind="stable")  # file order within a replay: its first op names the device
        device[has] = dev[by_r][np.searchsorted(r[by_r], has)]
        stm_l = stm[order].tolist()
        for k, a, b in zip(has.tolist(), head.tolist(), (head + count[has]).tolist()):
            streams[k] = ",".join(str(int(x)) for x in sorted(set(stm_l[a:b])))
    span = last - first
    return pd.DataFrame({
        "replay": np.arange(n), "launch_row": launches["row"].to_numpy(), "name": launches["name"].to_numpy(),
        "pid": launches["pid"].to_numpy(), "tid": launches["tid"].to_numpy(),
        "correlation": launches["correlation"].to_numpy(), "launch_ts_us": launches["ts_us"].to_numpy(),
        "launch_end_us": launches["end_us"].to_numpy(), "device": device, "streams": streams,
        "ops_count": count.astype(np.int64), "first_ts_us": first, "last_end_us": last,
        "span_us": np.nan_to_num(span), "busy_us": busy, "gaps_us": np.nan_to_num(span - busy),
        "launch_to_start_us": first - launches["ts_us"].to_numpy(), "recorded": count > 0,
    })[REPLAY_COLUMNS]


def device_gaps(ops: pd.DataFrame, replays: pd.DataFrame | None = None, *,
                kernel_wait_us: float = 30.0) -> pd.DataFrame:
    """Idle gaps per device: times when no stream of the device runs an op (``GAP_COLUMNS``).

    ``category``: ``host_wait`` (the op ending the gap was launched after the gap began: for
    a graph op that is its replay's launch), ``kernel_wait`` (shorter than ``kernel_wait_us``
    with the next op already queued), ``other``, or ``unrecorded`` (the first gap ending after
    the launch of a replay with no recorded ops: its work ran there, unseen). ``replay``: the
    replay of the op ending the gap (-1: not a graph op)."""
    if len(ops) == 0:
        return pd.DataFrame({c: [] for c in GAP_COLUMNS})
    o = ops.sort_values(["device", "ts_us"], kind="stable")
    dev, ts, end = o["device"].to_numpy(), o["ts_us"].to_numpy(), o["end_us"].to_numpy()
    same = np.zeros(len(o), bool)
    same[1:] = dev[1:] == dev[:-1]
    idx, prev_end, gap = gaps_in_runs(ts, end, same)
    launch = o["launch_ts_us"].to_numpy()[idx]
    g0, g1, gd = prev_end[idx], ts[idx], gap[idx]
    host_wait = launch > g0
    kernel_wait = ~host_wait & (gd < kernel_wait_us)
    cat = np.where(host_wait, "host_wait", np.where(kernel_wait, "kernel_wait", "other")).astype(object)
    rep = np.full(len(idx), -1, np.int64)
    if replays is not None and len(replays):
        launches = pd.DataFrame({"correlation": replays["correlation"].to_numpy()})
        rep = replay_index(o.iloc[idx], launches)
        missing = replays[~replays["recorded"].to_numpy()]
        for t_launch in missing["launch_ts_us"].to_numpy():
            # an unrecorded launch names no device: its work ran in the first gap after it
            cand = np.flatnonzero(g1 > t_launch)
            if len(cand):
                k = cand[np.argmin(g1[cand])]
                cat[k] = "unrecorded"
    return pd.DataFrame({"device": dev[idx], "start_us": g0, "end_us": g1, "dur_us": gd, "category": cat,
                         "next_op": o["name"].to_numpy()[idx], "replay": rep})


def device_idle(ops: pd.DataFrame, gaps: pd.DataFrame, stream_idle_us: dict | None = None) -> pd.DataFrame:
    """Per device: span, busy (union over streams), idle by category (``DEVICE_COLUMNS``, us).

    ``idle_us`` counts only real gaps (every stream idle, and not the place of an unrecorded
    replay: that time is ``unrecorded_us``). ``per_stream_idle_sum_us`` (from ``stream_idle_us``,
    ``{device: sum of the per-stream idle}``) shows what summing stream idle would claim."""
    if len(ops) == 0:
        return pd.DataFrame({c: [] for c in DEVICE_COLUMNS})
    g = ops.groupby("device", sort=True)
    out = g.size().rename("ops_count").reset_index()
    out["first"] = g["ts_us"].min().to_numpy()
    out["last"] = g["end_us"].max().to_numpy()
    out["streams_count"] = g["stream"].nunique().to_numpy()
    out["span_us"] = out["last"] - out["first"]
    idle = gaps.groupby(["category", "device"])["dur_us"].sum().to_dict()  # one pass for all causes
    devices = out["device"].tolist()
    for cat in GAP_CATEGORIES:
        col = "unrecorded_us" if cat == "unrecorded" else f"idle_{cat}_us"
        out[col] = [float(idle.get((cat, d), 0.0)) for d in devices]
    out["idle_us"] = out["idle_host_wait_us"] + out["idle_kernel_wait_us"] + out["idle_other_us"]
    out["busy_us"] = out["span_us"] - out["idle_us"] - out["unrecorded_us"]
    out["idle_fraction"] = np.where(out["span_us"] > 0, out["idle_us"] / out["span_us"].where(out["span_us"] > 0, 1), 0.0)
    sums = stream_idle_us or {}
    out["per_stream_idle_sum_us"] = [float(sums.get(int(d), 0.0)) for d in out["device"]]
    return out[DEVICE_COLUMNS]
