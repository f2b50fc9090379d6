"""Host call sites of a trace without device events (a CPU run): what the host did between steps.

On a GPU trace the lab ranks the call sites the launching thread was in while the device sat
idle (``bubbles.host_starvation``). A host-only trace (vLLM's engine on a CPU, where the
forward runs on the host too) has no device idle to attribute, but the same question has an
answer: between two model-runner steps the engine thread schedules the next step and
processes the last one's output, and on a GPU that time is where the device would wait unless
it is overlapped. :func:`between_step_call_sites` cuts the step thread's time between
consecutive steps into windows and ranks the innermost call sites inside them with the same
attribution as host-wait bubbles (``bubbles.attribute_windows``): annotation, Python frame,
CPU op, runtime call.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.trace.analysis.device.bubbles import attribute_windows, label_call_sites
from labkit.trace.analysis.host.callsite import LAYER_NAMES
from labkit.trace.read.columns import group_codes
from labkit.trace.read.load import Trace

__all__ = ["HOST_SITE_COLUMNS", "between_step_windows", "between_step_call_sites"]

HOST_SITE_COLUMNS = ["call_site", *LAYER_NAMES, "host_us", "window_count", "share"]


def between_step_windows(steps: pd.DataFrame) -> pd.DataFrame:
    """Windows from each step's end to the next step's start on the same thread.

    ``steps``: the step table of ``labkit.trace.analysis.host.steps.detect_steps`` (``start_us``, ``end_us``,
    ``pid``, ``tid``). Returns ``id``, ``pid``, ``tid``, ``start_us``, ``end_us`` (positive gaps only).
    """
    cols = ["id", "pid", "tid", "start_us", "end_us"]
    if len(steps) < 2:
        return pd.DataFrame({c: [] for c in cols})
    rows = []
    for (pid, tid), s in steps.groupby(["pid", "tid"], sort=False):
        s = s.sort_values("start_us", kind="stable")
        ends = np.maximum.accumulate(s["end_us"].to_numpy())[:-1]
        starts = s["start_us"].to_numpy()[1:]
        for a, b in zip(ends, starts):
            if b > a:
                rows.append((len(rows), pid, tid, float(a), float(b)))
    return pd.DataFrame(rows, columns=cols)


def between_step_call_sites(trace: Trace, steps: pd.DataFrame, *, top: int | None = None) -> pd.DataFrame:
    """Call sites ranked by the host time they took between steps (``HOST_SITE_COLUMNS``).

    ``host_us``: time inside the windows during which the step thread was inside that call
    site (innermost layers, as for host-wait bubbles); ``window_count``: windows it appeared in;
    ``share``: of all between-step time.
    """
    windows = between_step_windows(steps)
    if len(windows) == 0:
        return pd.DataFrame({c: [] for c in HOST_SITE_COLUMNS})
    pairs = attribute_windows(trace, windows)
    if len(pairs) == 0:
        return pd.DataFrame({c: [] for c in HOST_SITE_COLUMNS})
    pairs["call_site"] = label_call_sites(pairs)
    code, keys = group_codes(pairs["call_site"].tolist(), *(pairs[c].tolist() for c in LAYER_NAMES))
    rank = pd.DataFrame(keys, columns=["call_site", *LAYER_NAMES])
    rank["host_us"] = pd.Series(pairs["overlap_us"].to_numpy()).groupby(code, sort=False).sum().to_numpy()
    ids = pd.Series(pairs["id"].to_numpy()).groupby(code, sort=False).nunique()
    rank["window_count"] = ids.to_numpy().astype(np.int64)
    total = float((windows["end_us"] - windows["start_us"]).sum())
    rank["share"] = rank["host_us"] / total if total > 0 else 0.0
    rank = rank.sort_values("host_us", ascending=False, kind="stable").reset_index(drop=True)
    return rank.head(top) if top is not None else rank
