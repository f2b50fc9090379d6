"""Stream busy/idle figures for other parts of the lab (the H2D benchmark, the copy ledger, the engine's rows),
from the analyzer's own loader and idle rules, so they equal ``labkit analyze``'s figures for the same file.
"""

from __future__ import annotations

import pandas as pd

from labkit.trace.analysis.device.bubbles import device_ops, find_bubbles, stream_idle
from labkit.trace.read.load import as_trace

#: GPU memcpy event names (Kineto) -> staging kind
H2D_EVENT_KINDS = {
    "Memcpy HtoD (Pageable -> Device)": "pageable",
    "Memcpy HtoD (Pinned -> Device)": "pinned",
}
_NO_STEPS = pd.DataFrame({"step": [], "start_us": [], "end_us": []})


def stream_table(trace) -> pd.DataFrame:
    """``labkit analyze``'s per-stream table (``STREAM_COLUMNS`` of ``labkit.trace.analysis.device.bubbles``) for a
    trace path, decoded document or ``Trace``."""
    tr = as_trace(trace)
    ops = device_ops(tr)
    return stream_idle(ops, find_bubbles(tr, _NO_STEPS, ops=ops))


def stream_busy_idle(trace) -> list[dict]:
    """One dict per device stream: ``device``, ``stream``, ``events``, ``busy_us``, ``idle_us``, ``span_us``."""
    return [{"device": int(r.device), "stream": int(r.stream), "events": int(r.ops_count), "busy_us": float(r.busy_us),
             "idle_us": float(r.idle_us), "span_us": float(r.span_us)}
            for r in stream_table(trace).itertuples()]


def busiest_stream_idle(trace) -> dict:
    """The busiest stream's ``device_idle_frac`` (idle / span), ``trace_idle_us`` and ``trace_busy_us``
    ({} when the trace has no device work)."""
    t = stream_table(trace)
    if len(t) == 0:
        return {}
    r = t.sort_values("busy_us", ascending=False, kind="stable").iloc[0]
    return {"device_idle_frac": float(r["idle_fraction"]) if r["span_us"] > 0 else None,
            "trace_idle_us": float(r["idle_us"]), "trace_busy_us": float(r["busy_us"])}


def count_h2d(trace) -> dict:
    """Host-to-device memcpy events: ``pageable_count``, ``pinned_count``, ``h2d_count`` and the bytes
    of each (``*_bytes``, from ``args.bytes``; absent counts as 0)."""
    ev = as_trace(trace).events
    out = {"pageable_count": 0, "pinned_count": 0, "pageable_bytes": 0, "pinned_bytes": 0}
    names = ev["name"].astype(str)
    for name, kind in H2D_EVENT_KINDS.items():
        m = (names == name).to_numpy()
        out[f"{kind}_count"] = int(m.sum())
        out[f"{kind}_bytes"] = int(ev["bytes"].to_numpy()[m].clip(min=0).sum())
    out["h2d_count"] = out["pageable_count"] + out["pinned_count"]
    out["h2d_bytes"] = out["pageable_bytes"] + out["pinned_bytes"]
    return out
