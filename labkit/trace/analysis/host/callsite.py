"""Call sites on a host thread: the innermost annotation, Python frame, CPU op and runtime call at each moment.

See docs/trace-analyzer.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.trace.analysis.host.steps import between_step_windows
from labkit.trace.read.columns import cat_mask, group_codes
from labkit.trace.read.load import EventTables

#: event category -> layer (column in the call-site tables)
LAYERS = {
    "user_annotation": "annotation",
    "python_function": "python_frame",
    "cpu_op": "cpu_op",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "Runtime": "runtime",
    "Driver": "runtime",
}
LAYER_NAMES = ("annotation", "python_frame", "cpu_op", "runtime")
NO_LABEL = ""


@dataclass
class Segments:
    """Time on one thread cut into pieces: ``start_us``/``end_us`` and the innermost name per layer, as
    ``codes`` (layer -> index into ``names``, -1 when nothing of that layer is open)."""

    start_us: np.ndarray  # (n,) float64
    end_us: np.ndarray  # (n,) float64
    codes: dict  # layer -> (n,) int32
    names: np.ndarray  # object array of str


def label_strings(names: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The names of ``codes`` (index into ``names``; -1: ``NO_LABEL``) as an object array."""
    return np.append(names, NO_LABEL).astype(object)[codes]


def merge_windows(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort and merge ``[start, end]`` windows (us) into disjoint ones."""
    if len(starts) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    e_run = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > e_run[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.append(e_run[idx[1:] - 1], e_run[-1])
    return out_s, out_e


def overlaps_windows(starts, ends, win_s, win_e) -> np.ndarray:
    """Mask of events ``[starts, ends]`` that touch any disjoint sorted window."""
    if len(win_s) == 0:
        return np.zeros(len(starts), bool)
    k = np.searchsorted(win_e, starts, side="left")  # the first window not ended before the start
    return np.append(win_s, np.inf)[k] <= ends  # past the last window: none (inf starts after every end)


def sweep(starts, ends, layer_idx, codes, names, n_layers: int = len(LAYER_NAMES)) -> Segments:
    """Cut the time covered by nested events into segments labelled per layer.

    ``starts``/``ends`` in us, ``layer_idx`` (int per event, index into ``LAYER_NAMES``), ``codes``
    (int per event: its name in ``names``, -1 for none). Where events of one layer overlap without nesting,
    the one that started last is innermost until it ends: a layer's label is its open event that started last.
    """
    keep = ends > starts
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        return Segments(np.zeros(0), np.zeros(0), {k: np.zeros(0, np.int32) for k in LAYER_NAMES[:n_layers]}, names)
    n = len(idx)
    s, e = starts[idx], ends[idx]
    # boundaries: ends before starts at the same time; outer starts first, inner ends first
    t = np.concatenate([s, e])
    is_start = np.concatenate([np.ones(n, np.int8), np.zeros(n, np.int8)])
    order = np.lexsort((np.concatenate([-e, -s]), is_start, t))
    del s, e
    pos = np.empty(2 * n, np.int32)  # each boundary's place in the sweep (int32: memory, not range, is the limit)
    pos[order] = np.arange(2 * n, dtype=np.int32)
    t, is_start = t[order], is_start[order]
    del order
    open_after = np.cumsum(is_start * 2 - 1, dtype=np.int32)
    seg = np.flatnonzero((open_after[:-1] > 0) & (t[1:] > t[:-1])).astype(np.int32)  # boundary p to p + 1
    del open_after, is_start
    layer, codes = np.asarray(layer_idx)[idx], np.asarray(codes, dtype=np.int32)[idx]
    out = {}
    for j, name in enumerate(LAYER_NAMES[:n_layers]):
        mine = np.flatnonzero(layer == j)
        top = _last_open(pos[:n][mine], pos[n:][mine], seg)
        out[name] = np.append(codes[mine], np.int32(-1))[top]  # top -1: the appended -1, no label
    return Segments(t[seg], t[seg + 1], out, names)


def _last_open(sp: np.ndarray, ep: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each sweep position in ``at``: which event (index into ``sp``/``ep``, -1: none) of those with
    boundaries at positions ``sp`` (start) and ``ep`` (end) is open after it and started last.

    The answer changes only at these events' own boundaries: at a start it is that event; at the end of the
    event on top (no later-started one still open: the next event to end later started after it ended)
    the event before it in start order that ends later still, the one under it."""
    if len(sp) == 0:
        return np.full(len(at), -1, np.int32)
    o = np.argsort(sp, kind="stable").astype(np.int32)
    sp, ep = sp[o], ep[o]
    on_top = _nearest_later_end(ep, 1) >= np.searchsorted(sp, ep, side="right")
    at_pos = np.concatenate([sp, ep[on_top]])
    value = np.concatenate([np.arange(len(sp), dtype=np.int32), _nearest_later_end(ep, -1)[on_top]])
    k = np.argsort(at_pos)
    last = np.searchsorted(at_pos[k], at, side="right") - 1
    out = np.where(last >= 0, value[k][np.maximum(last, 0)], -1)
    return np.where(out >= 0, o[np.maximum(out, 0)], -1)


def _nearest_later_end(ep: np.ndarray, step: int) -> np.ndarray:
    """For each event, the nearest one before it (``step`` -1; -1 if none) or after it (+1; ``len(ep)`` if none)
    that ends later, by pointer jumping: an event passed over ends no later than the one it was passed for."""
    m = len(ep)
    cand = np.arange(step, m + step, dtype=np.int32)
    todo = np.flatnonzero((cand >= 0) & (cand < m))
    while len(todo):
        todo = todo[ep[cand[todo]] < ep[todo]]
        nxt = cand[cand[todo]]
        cand[todo] = nxt
        todo = todo[(nxt >= 0) & (nxt < m)]
    return cand


def thread_segments(trace: EventTables, rows: np.ndarray, win_s, win_e) -> Segments:
    """Segments of one thread's host events (``rows`` of the events table, as ``thread_rows`` gives them)
    restricted to the events that touch the disjoint sorted windows ``win_s``/``win_e``."""
    ev = trace.events
    s = ev["ts_us"].to_numpy()[rows]
    e = s + ev["dur_us"].to_numpy()[rows]
    m = overlaps_windows(s, e, win_s, win_e)
    sub = rows[m]
    cat = ev["cat"]
    # the loader's categorical: one lookup per category, not per event (the rows are the layers' events only,
    # so a category of no layer, or none, marks no row: 0 for them)
    of_code = np.array([LAYER_NAMES.index(LAYERS[c]) if c in LAYERS else 0 for c in cat.cat.categories] + [0])
    layer_idx = of_code[cat.cat.codes.to_numpy()[sub]]
    codes, names = trace.once("name_codes", lambda: name_codes(ev["name"]))
    return sweep(s[m], e[m], layer_idx, codes[sub], names)


def name_codes(col) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, names)`` of the events table's (categorical) name column: its names are one list, so codes
    from any of its rows compare; an empty name is no name (-1), as its label reads."""
    names = np.asarray(col.cat.categories, dtype=object)
    codes = col.cat.codes.to_numpy().astype(np.int32)
    empty = np.flatnonzero(names == NO_LABEL)
    if len(empty):
        codes[codes == empty[0]] = -1
    return codes, names


def call_site_label(annotation: str, python_frame: str, cpu_op: str, runtime: str) -> str:
    """A short call-site name: the most specific layer that is present, with its context."""
    parts = [p for p in (annotation, python_frame, cpu_op, runtime) if p]
    if not parts:
        return "(no host activity recorded)"
    return " > ".join(parts[-2:]) if len(parts) > 1 else parts[0]


def overlap_by_segment(seg: Segments, win_s, win_e, win_id):
    """Pairs (window id, segment index, overlap us) for windows overlapping the disjoint, sorted segments."""
    if len(seg.start_us) == 0 or len(win_s) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    i0 = np.searchsorted(seg.end_us, win_s, side="right")
    i1 = np.searchsorted(seg.start_us, win_e, side="left")
    counts = np.maximum(i1 - i0, 0)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    wid = np.repeat(np.arange(len(win_s)), counts)
    offs = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    sidx = np.repeat(i0, counts) + offs
    ov = np.minimum(seg.end_us[sidx], win_e[wid]) - np.maximum(seg.start_us[sidx], win_s[wid])
    keep = ov > 0
    return np.asarray(win_id)[wid[keep]], sidx[keep], ov[keep]


def innermost_at(seg: Segments, t_us: np.ndarray) -> dict:
    """Layer labels of the segment containing each time ``t_us`` ("" where none)."""
    if len(seg.start_us) == 0 or len(t_us) == 0:
        return {k: np.full(len(t_us), NO_LABEL, dtype=object) for k in seg.codes}
    j = np.searchsorted(seg.start_us, t_us, side="right") - 1
    ok = (j >= 0) & (seg.end_us[np.maximum(j, 0)] >= t_us)
    return {k: label_strings(seg.names, np.where(ok, c[np.maximum(j, 0)], -1)) for k, c in seg.codes.items()}


HOST_SITE_COLUMNS = ["call_site", *LAYER_NAMES, "host_us", "window_count", "share"]


def thread_rows(trace: EventTables, pid: int, tid: int) -> np.ndarray:
    """Rows of the events table holding the call-site layers' events of thread ``(pid, tid)``, computed once per
    loaded trace and thread. A thread without Python frames borrows those recorded under its tid, else the
    only thread with any."""
    cache = trace.once("thread_rows", dict)
    key = (int(pid), int(tid))
    if key not in cache:
        ev = trace.events
        if None not in cache:
            cache[None] = cat_mask(ev["cat"], LAYERS), cat_mask(ev["cat"], ("python_function",))
        layer, is_py = cache[None]
        pids, tids = ev["pid"].to_numpy(), ev["tid"].to_numpy()
        mine = np.flatnonzero(layer & (pids == pid) & (tids == tid))
        if not is_py[mine].any():
            same_tid = np.flatnonzero(is_py & (tids == tid))
            py = np.flatnonzero(is_py)
            if len(same_tid):
                mine = np.concatenate([mine, same_tid])
            elif len(py) and (pids[py] == pids[py[0]]).all() and (tids[py] == tids[py[0]]).all():  # one thread has them
                mine = np.concatenate([mine, py])
        cache[key] = mine
    return cache[key]


def attribute_windows(trace: EventTables, windows: pd.DataFrame) -> pd.DataFrame:
    """Split host time inside windows by innermost call site: one row per (window, call site), ``overlap_us``."""
    parts = []
    names = None  # every thread's segments name events by the codes of one events table
    for (pid, tid), w in windows.groupby(["pid", "tid"], sort=False):
        ws, we = merge_windows(w["start_us"].to_numpy(), w["end_us"].to_numpy())
        seg = thread_segments(trace, thread_rows(trace, pid, tid), ws, we)
        names = seg.names
        wid, sidx, ov = overlap_by_segment(seg, w["start_us"].to_numpy(), w["end_us"].to_numpy(), w["id"].to_numpy())
        part = pd.DataFrame({"id": wid, "overlap_us": ov, **{k: seg.codes[k][sidx] for k in LAYER_NAMES}})
        covered = part.groupby("id")["overlap_us"].sum()
        rest = (w.set_index("id")["end_us"] - w.set_index("id")["start_us"]).sub(covered, fill_value=0.0)
        rest = rest[rest > 1e-9]
        if len(rest):
            gap = pd.DataFrame({"id": rest.index.to_numpy(), "overlap_us": rest.to_numpy(),
                                **{k: np.full(len(rest), -1, np.int32) for k in LAYER_NAMES}})
            part = pd.concat([part, gap], ignore_index=True)
        parts.append(part)
    if not parts:
        return pd.DataFrame({c: [] for c in ["id", *LAYER_NAMES, "overlap_us"]})
    out = pd.concat(parts, ignore_index=True)
    del parts, part, seg  # held once, in ``out``
    code, keys = group_codes(out["id"].to_numpy(), *(out[c].to_numpy() for c in LAYER_NAMES))
    res = pd.DataFrame(keys, columns=["id", *LAYER_NAMES])
    for k in LAYER_NAMES:
        res[k] = label_strings(names, res[k].to_numpy())
    res["overlap_us"] = pd.Series(out["overlap_us"].to_numpy()).groupby(code, sort=False).sum().to_numpy()
    return res


def label_call_sites(df: pd.DataFrame) -> np.ndarray:
    """``call_site_label`` for every row of a table with the layer columns (computed per unique combination)."""
    labels: dict = {}
    out = np.empty(len(df), dtype=object)
    for i, key in enumerate(zip(*(df[c].to_numpy() for c in LAYER_NAMES))):
        label = labels.get(key)
        if label is None:
            label = labels[key] = call_site_label(*key)
        out[i] = label
    return out


def between_step_call_sites(trace: EventTables, steps: pd.DataFrame, *, top: int | None = None) -> pd.DataFrame:
    """A host-only trace's call sites ranked by the host time they took between steps (``HOST_SITE_COLUMNS``):
    ``host_us`` inside the windows, ``window_count`` windows it appeared in, ``share`` of all between-step time.
    ``steps``: a ``detect_steps`` table."""
    windows = between_step_windows(steps)
    pairs = attribute_windows(trace, windows) if len(windows) else []
    if len(pairs) == 0:
        return pd.DataFrame({c: [] for c in HOST_SITE_COLUMNS})
    pairs["call_site"] = label_call_sites(pairs)
    code, keys = group_codes(pairs["call_site"].to_numpy(), *(pairs[c].to_numpy() for c in LAYER_NAMES))
    rank = pd.DataFrame(keys, columns=["call_site", *LAYER_NAMES])
    rank["host_us"] = pd.Series(pairs["overlap_us"].to_numpy()).groupby(code, sort=False).sum().to_numpy()
    rank["window_count"] = pd.Series(pairs["id"].to_numpy()).groupby(code, sort=False).nunique().to_numpy().astype(np.int64)
    total = float((windows["end_us"] - windows["start_us"]).sum())
    rank["share"] = rank["host_us"] / total if total > 0 else 0.0
    rank = rank.sort_values("host_us", ascending=False, kind="stable").reset_index(drop=True)
    return rank.head(top) if top is not None else rank
