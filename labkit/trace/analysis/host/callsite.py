"""Call sites on a host thread: which annotation, Python frame, CPU op and runtime call was innermost.

A host thread's events nest in time (``user_annotation`` around ``python_function`` frames
around ``cpu_op`` around ``cuda_runtime`` calls). For any window of time on a thread,
``HostStacks`` answers "what was the thread inside of, and for how long": it sweeps the
events that overlap the windows of interest and cuts time into segments, each labelled with
the innermost event of every layer that contains it. Only events overlapping the windows are
swept, so the cost follows the windows, not the size of the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.trace.read.columns import column_strings

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
    """Time on one thread cut into pieces: ``start_us``/``end_us`` and the innermost name per layer."""

    start_us: np.ndarray  # (n,) float64
    end_us: np.ndarray  # (n,) float64
    labels: dict  # layer -> (n,) object array of names ("" when nothing of that layer is open)


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
    k = np.searchsorted(win_e, starts, side="left")
    ok = k < len(win_s)
    kk = np.minimum(k, len(win_s) - 1)
    return ok & (win_s[kk] <= ends)


def sweep(starts, ends, layer_idx, names, n_layers: int = len(LAYER_NAMES)) -> Segments:
    """Cut the time covered by nested events into segments labelled per layer.

    ``starts``/``ends`` in us, ``layer_idx`` (int per event, index into ``LAYER_NAMES``), ``names``
    (str per event). Where events of one layer overlap without nesting, the one that started
    last is innermost until it ends.
    """
    n = len(starts)
    keep = ends > starts
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        return Segments(np.zeros(0), np.zeros(0), {k: np.zeros(0, object) for k in LAYER_NAMES[:n_layers]})
    s, e = starts[idx], ends[idx]
    # boundaries: ends before starts at the same time; outer starts first, inner ends first
    t = np.concatenate([s, e])
    kind = np.concatenate([np.ones(len(s), np.int8), np.zeros(len(e), np.int8)])
    tie = np.concatenate([-e, -s])
    ev = np.concatenate([idx, idx])
    order = np.lexsort((tie, kind, t))
    stacks: list[list[int]] = [[] for _ in range(n_layers)]
    seg_s: list[float] = []
    seg_e: list[float] = []
    seg_lab: list[tuple] = []
    tops = [-1] * n_layers
    open_count = 0
    prev = None
    t_l, kind_l, ev_l = t[order].tolist(), kind[order].tolist(), ev[order].tolist()
    layer_l = layer_idx.tolist() if hasattr(layer_idx, "tolist") else list(layer_idx)
    del n
    for tt, kk, i in zip(t_l, kind_l, ev_l):
        if open_count and tt > prev:
            seg_s.append(prev)
            seg_e.append(tt)
            seg_lab.append(tuple(tops))
        li = layer_l[i]
        st = stacks[li]
        if kk:
            st.append(i)
            open_count += 1
        else:
            if st[-1] == i:
                st.pop()
            else:
                st.remove(i)
            open_count -= 1
        tops[li] = st[-1] if st else -1
        prev = tt
    names_arr = np.asarray(names, dtype=object)
    labels = {}
    lab = np.asarray(seg_lab, dtype=np.int64).reshape(-1, n_layers)
    with_empty = np.append(names_arr, NO_LABEL).astype(object)
    for j, layer in enumerate(LAYER_NAMES[:n_layers]):
        labels[layer] = with_empty[np.where(lab[:, j] < 0, len(names_arr), lab[:, j])]
    return Segments(np.asarray(seg_s, float), np.asarray(seg_e, float), labels)


def thread_segments(host, win_s, win_e) -> Segments:
    """Segments of one thread's host events (DataFrame with ``ts_us``, ``dur_us``, ``cat``, ``name``)
    restricted to the events that touch the disjoint sorted windows ``win_s``/``win_e``."""
    s = host["ts_us"].to_numpy()
    e = s + host["dur_us"].to_numpy()
    m = overlaps_windows(s, e, win_s, win_e)
    sub = host[m]
    layer_of = {name: LAYER_NAMES.index(layer) for name, layer in LAYERS.items()}
    layer_idx = np.array([layer_of[c] for c in column_strings(sub["cat"]).tolist()], dtype=np.int64)
    return sweep(s[m], e[m], layer_idx, column_strings(sub["name"]))


def call_site_label(annotation: str, python_frame: str, cpu_op: str, runtime: str) -> str:
    """A short call-site name: the most specific layer that is present, with its context."""
    parts = [p for p in (annotation, python_frame, cpu_op, runtime) if p]
    if not parts:
        return "(no host activity recorded)"
    return " > ".join(parts[-2:]) if len(parts) > 1 else parts[0]


def overlap_by_segment(seg: Segments, win_s, win_e, win_id):
    """Pairs (window id, segment index, overlap us) for windows overlapping segments.

    ``win_*`` need not be disjoint; segments are disjoint and sorted.
    """
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
    out = {k: np.full(len(t_us), NO_LABEL, dtype=object) for k in seg.labels}
    if len(seg.start_us) == 0 or len(t_us) == 0:
        return out
    j = np.searchsorted(seg.start_us, t_us, side="right") - 1
    ok = (j >= 0) & (seg.end_us[np.maximum(j, 0)] >= t_us)
    for k, lab in seg.labels.items():
        out[k][ok] = lab[j[ok]]
    return out
