"""Trace analysis facade: ``analyze_trace(path_or_trace)`` -> an ``Analysis`` with every table the lab reports.

Streams, bubbles, host starvation, copies, steps, CUDA-graph replays, device idle, the HTA-compatible
breakdown and a ``source`` section (real or simulated); ``Analysis.to_json()`` is the document of
``labkit analyze --json`` (docs/analyze-json.md).
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from labkit.trace.read import load as _load
from labkit.trace.analysis.device.bubbles import (
    DEFAULT_KERNEL_WAIT_US,
    cat_mask,
    device_ops,
    find_bubbles,
    host_starvation,
    hta_idle_breakdown,
    steps_table,
    stream_idle,
)
from labkit.trace.analysis.device.cuda_graphs import device_gaps, device_idle, graph_replays, replay_index
from labkit.trace.analysis.device.h2d import MIN_COUNT, SMALL_BYTES, CopyReport, copy_report
from labkit.trace.analysis.host.callsite import between_step_call_sites
from labkit.trace.analysis.host.engine_steps import engine_phase_table, phase_summary
from labkit.trace.analysis.host.steps import detect_steps, step_phases
from labkit.trace.read.columns import group_codes
from labkit.trace.read.load import DEVICE_CATS, Trace, as_trace

SCHEMA = 1


@dataclass
class Analysis:
    """Everything ``analyze_trace`` found; tables are DataFrames with ``_us``/``_bytes`` columns."""

    source: dict
    streams: pd.DataFrame
    bubbles: pd.DataFrame
    host_starvation: pd.DataFrame
    copies: CopyReport
    steps: pd.DataFrame
    hta_compatible: pd.DataFrame
    host_threads: pd.DataFrame
    kernels: pd.DataFrame
    summary: dict
    params: dict = field(default_factory=dict)
    trace: Trace | None = field(default=None, repr=False)
    ops: pd.DataFrame | None = field(default=None, repr=False)
    replays: pd.DataFrame | None = None  #: CUDA-graph replays, one row per launch (labkit.trace.analysis.device.cuda_graphs)
    devices: pd.DataFrame | None = None  #: idle per device, real gaps only (labkit.trace.analysis.device.cuda_graphs)
    device_gaps: pd.DataFrame | None = field(default=None, repr=False)
    step_info: dict = field(default_factory=dict)  #: how steps were found (labkit.trace.analysis.host.steps.detect_steps)
    step_phases: pd.DataFrame | None = None  #: host time per annotated phase per step
    host_sites: pd.DataFrame | None = None  #: host-only traces: call sites between steps (labkit.trace.analysis.host.hostonly)
    engine_phases: pd.DataFrame | None = None  #: vLLM's whole engine steps by phase (labkit.trace.analysis.host.engine_steps)

    @property
    def h2d(self) -> pd.DataFrame:
        """Host-to-device copies (rows of ``copies.copies`` with direction HtoD)."""
        return self.copies.h2d

    def to_json(self, top: int = 20) -> dict:
        """A JSON-ready dict: ``source``, ``summary``, ``streams``, ``bubbles`` (largest ``top``),
        ``host_starvation`` (top ``top``), ``h2d``, ``steps``, ``hta_compatible``, ``host_threads``,
        ``kernels`` (top ``top`` by total time)."""
        big = self.bubbles.sort_values("dur_us", ascending=False, kind="stable").head(top)
        h2d = self.h2d
        return _clean({
            "schema": SCHEMA,
            "source": self.source,
            "params": self.params,
            "summary": self.summary,
            "streams": _records(self.streams),
            "bubbles": _records(big),
            "host_starvation": _records(self.host_starvation.head(top)),
            "h2d": {
                "count": int(len(h2d)),
                "pageable_count": int((h2d["kind"] == "pageable").sum()),
                "pinned_count": int((h2d["kind"] == "pinned").sum()),
                "total_bytes": int(h2d["bytes"].clip(lower=0).sum()),
                "host_stall_us": float(h2d["host_stall_us"].sum()),
                "copies": _records(h2d.rename(columns={"bytes": "size_bytes"}).head(1000)),
                "per_step": _records(self.copies.by_step.rename(columns={"h2d_bytes": "h2d_bytes"})),
                "per_call_site": _records(self.copies.by_call_site.rename(columns={"bytes": "total_bytes"})),
                "flags": self.copies.flags,
                "other_copies": _records(self.copies.copies[self.copies.copies["direction"] != "HtoD"]
                                         .groupby(["direction", "kind"], as_index=False)
                                         .agg(count=("bytes", "size"), total_bytes=("bytes", "sum"))),
            },
            "steps": _records(self.steps),
            "step_detection": self.step_info,
            "step_phases": _records(self.step_phases) if self.step_phases is not None else [],
            "devices": _records(self.devices) if self.devices is not None else [],
            "graphs": self._graphs_json(top),
            "hta_compatible": _records(self.hta_compatible),
            "host_threads": _records(self.host_threads),
            "kernels": _records(self.kernels.head(top)),
            "host_call_sites": _records(self.host_sites.head(top)) if self.host_sites is not None else [],
            "engine_steps": _records(self.engine_phases) if self.engine_phases is not None else [],
        })

    def _graphs_json(self, top: int) -> dict:
        r = self.replays
        if r is None or len(r) == 0:
            return {"launches_count": 0, "recorded_count": 0, "unrecorded_count": 0, "ops_count": 0, "replays": []}
        rec = r[r["recorded"]]
        return {"launches_count": int(len(r)), "recorded_count": int(len(rec)),
                "unrecorded_count": int(len(r) - len(rec)), "ops_count": int(r["ops_count"].sum()),
                "busy_us": float(rec["busy_us"].sum()), "gaps_us": float(rec["gaps_us"].sum()),
                "launch_to_start_us_median": float(rec["launch_to_start_us"].median()) if len(rec) else None,
                "replays": _records(r.sort_values("span_us", ascending=False, kind="stable").head(top))}

    def _step_lines(self, top: int) -> list[str]:
        info = self.step_info or {}
        if info.get("note"):
            return [f"note: {info['note']}"]
        if len(self.steps) == 0:
            return []
        runner = f", model runner {info['model_runner']}" if info.get("model_runner") else ""
        shown = min(top, len(self.steps))
        out = [f"steps: {len(self.steps)} from {info.get('source')} markers{runner} (first {shown}):",
               f"{'step':>5} {'host_ms':>9} {'ops':>6} {'busy_ms':>9} {'host_wait':>9} {'kern_wait':>9} {'other':>9}"
               "  phases (host ms)"]
        ph = self.step_phases if self.step_phases is not None else pd.DataFrame(columns=["step", "phase", "host_us"])
        for r in self.steps.head(top).itertuples():
            p = ph[ph["step"] == r.step].sort_values("host_us", ascending=False, kind="stable").head(4)
            phases = ", ".join(f"{x.phase[:28]} {x.host_us / 1e3:.2f}" for x in p.itertuples())
            out.append(f"{r.step:>5} {r.dur_us / 1e3:>9.3f} {r.ops_count:>6} {r.device_busy_us / 1e3:>9.3f} "
                       f"{r.idle_host_wait_us / 1e3:>9.3f} {r.idle_kernel_wait_us / 1e3:>9.3f} "
                       f"{r.idle_other_us / 1e3:>9.3f}  {phases}")
        return out

    def _engine_lines(self) -> list[str]:
        table = self.engine_phases
        if table is None or len(table) == 0:
            return []
        med = {r.phase: r.median_us / 1e3 for r in phase_summary(table).itertuples()}
        top = ", ".join(f"{p} {med[p]:.2f}" for p in ("schedule", "prepare_inputs", "encoder", "forward", "sample",
                                                      "update_from_output", "process_outputs", "other"))
        return [f"vLLM engine steps (whole step, from Python frames): {len(table)}, median {med['step']:.2f} ms; "
                f"per phase (ms): {top}",
                f"  inside schedule: encoder_inputs {med['encoder_inputs']:.2f}, get_num_embeds {med['get_num_embeds']:.2f}; "
                f"inside process_outputs: detokenize {med['detokenize']:.2f}"]

    def summary_lines(self, top: int = 5) -> list[str]:
        """A short human summary (for the CLI)."""
        s = self.source
        out = [f"trace: {s['file']}  ({s['kind']}; GPU: {s.get('gpu') or 'none recorded'})"]
        if s.get("skipped_events"):
            out.append(f"malformed events skipped: {s['skipped_events']} of {s['events']} ({s['skip_reasons']})")
        if not s["has_device_events"]:
            out.append("no device events in this trace: host time only")
        for r in self.host_threads.head(top).itertuples():
            out.append(f"  host thread {r.pid}/{r.tid}: busy {r.busy_us / 1e3:.3f} ms of {r.span_us / 1e3:.3f} ms")
        if len(self.streams):
            out.append(f"{'device':>6} {'stream':>6} {'ops':>7} {'busy_ms':>10} {'idle_ms':>10} {'host_wait':>10} "
                       f"{'kern_wait':>10} {'other':>10} {'idle%':>6}")
            for r in self.streams.itertuples():
                out.append(f"{r.device:>6} {r.stream:>6} {r.ops_count:>7} {r.busy_us / 1e3:>10.3f} {r.idle_us / 1e3:>10.3f} "
                           f"{r.idle_host_wait_us / 1e3:>10.3f} {r.idle_kernel_wait_us / 1e3:>10.3f} "
                           f"{r.idle_other_us / 1e3:>10.3f} {100 * r.idle_fraction:>6.1f}")
        if self.devices is not None and len(self.devices) and (self.replays is not None and len(self.replays)
                                                                or (self.devices["streams_count"] > 1).any()):
            out.append("per device (real gaps only: no stream busy; unrecorded = where unrecorded graph replays ran):")
            for r in self.devices.itertuples():
                out.append(f"  device {r.device}: busy {r.busy_us / 1e3:.3f} ms, idle {r.idle_us / 1e3:.3f} ms "
                           f"({100 * r.idle_fraction:.1f}%), unrecorded {r.unrecorded_us / 1e3:.3f} ms; "
                           f"per-stream idle summed would say {r.per_stream_idle_sum_us / 1e3:.3f} ms")
        if self.replays is not None and len(self.replays):
            g = self._graphs_json(top)
            out.append(f"CUDA graphs: {g['launches_count']} replays ({g['unrecorded_count']} without recorded ops), "
                       f"{g['ops_count']} ops, idle inside replays {g['gaps_us'] / 1e3:.3f} ms")
        out.extend(self._step_lines(top))
        out.extend(self._engine_lines())
        if self.host_sites is not None and len(self.host_sites):
            out.append(f"host call sites between steps (no device stream; top {top}):")
            for r in self.host_sites.head(top).itertuples():
                out.append(f"  {r.host_us / 1e3:>9.3f} ms {100 * r.share:>5.1f}%  {r.call_site[:100]}")
        if len(self.host_starvation):
            out.append(f"host call sites during host-wait idle (top {top}):")
            for r in self.host_starvation.head(top).itertuples():
                out.append(f"  {r.idle_overlap_us / 1e3:>9.3f} ms {100 * r.share:>5.1f}%  {r.call_site[:100]}")
        h = self.h2d
        if len(h):
            out.append(f"H2D copies: {len(h)} ({int((h['kind'] == 'pageable').sum())} pageable, "
                       f"{int((h['kind'] == 'pinned').sum())} pinned), host stall {h['host_stall_us'].sum() / 1e3:.3f} ms")
        for f in self.copies.flags[:top]:
            out.append(f"  FLAG repeated small pageable copies: {f['count']} at {f['call_site'][:90]}")
        return out


def _records(df: pd.DataFrame) -> list[dict]:
    return [{k: _scalar(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def _scalar(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if not math.isfinite(f) else f
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def _clean(obj):
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return _scalar(obj)


def host_thread_time(trace: Trace) -> pd.DataFrame:
    """Per host thread: event count, span and busy time (union of its events, us)."""
    ev = trace.events
    cols = ["pid", "tid", "events", "span_us", "busy_us"]
    keep = ~cat_mask(ev["cat"], DEVICE_CATS)  # an event without a category is not a device one
    pid, tid = ev["pid"].to_numpy()[keep], ev["tid"].to_numpy()[keep]
    if len(pid) == 0:
        return pd.DataFrame({c: [] for c in cols})
    ts = ev["ts_us"].to_numpy()[keep]
    end = ts + ev["dur_us"].to_numpy()[keep]
    order = np.lexsort((ts, tid, pid))  # by thread, then start (stable)
    pid, tid, ts, end = pid[order], tid[order], ts[order], end[order]
    cut = np.flatnonzero((pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])) + 1
    rows = []
    for a, b in zip(np.r_[0, cut], np.r_[cut, len(ts)]):
        run_end = np.maximum.accumulate(end[a:b])  # the end of the busy run so far
        gaps = float(np.clip(ts[a + 1:b] - run_end[:-1], 0, None).sum())
        span = float(run_end[-1] - ts[a])
        rows.append((int(pid[a]), int(tid[a]), int(b - a), span, span - gaps))
    g = pd.DataFrame(rows, columns=cols)
    return g.sort_values("busy_us", ascending=False, kind="stable").reset_index(drop=True)


def kernel_stats(ops: pd.DataFrame) -> pd.DataFrame:
    """Per device-op name: ``count``, ``total_us``, ``mean_us`` (sorted by total time)."""
    if len(ops) == 0:
        return pd.DataFrame({c: [] for c in ["name", "cat", "count", "total_us", "mean_us"]})
    code, groups = group_codes(ops["name"].to_numpy(), ops["cat"].to_numpy())  # kernel names are long strings
    total = pd.Series(ops["dur_us"].to_numpy()).groupby(code, sort=False).sum()
    k = pd.DataFrame({"name": [n for n, _ in groups], "cat": [c for _, c in groups],
                      "count": np.bincount(code, minlength=len(groups)).astype(np.int64), "total_us": total.to_numpy()})
    k["mean_us"] = k["total_us"] / k["count"]
    return k.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)


def describe_source(trace: Trace, ops: pd.DataFrame) -> dict:
    """File name, GPU, simulated flag and load statistics of a trace."""
    names = trace.device_names
    gpu = None
    props = trace.metadata.get("deviceProperties")
    used = sorted(set(int(d) for d in ops["device"].unique())) if len(ops) else []
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and p.get("id") in used and p.get("name"):
                gpu = str(p["name"])
                break
    if gpu is None and names:
        gpu = names[0]
    simulated = trace.is_simulated
    has_dev = trace.has_device_events()
    dist = trace.metadata.get("distributedInfo")
    st = trace.stats
    return {
        "file": Path(trace.path).name if trace.path else None,
        "gpu": gpu,
        "devices_used": used,
        "simulated": simulated,
        "kind": "simulated" if simulated else ("measured-gpu" if has_dev else "host-only"),
        "has_device_events": has_dev,
        "rank": dist.get("rank") if isinstance(dist, dict) else None,
        "world_size": dist.get("world_size") if isinstance(dist, dict) else None,
        "labkit": trace.metadata.get("labkit"),
        "events": int(st.n_events),
        "complete_events": int(st.n_complete),
        "skipped_events": int(st.skipped),
        "skip_reasons": dict(st.skip_reasons),
        "first_skipped": [{"index": i, "reason": r} for i, r in st.first_skipped],
        "sub_us_timestamps": bool(st.ts_float),
    }


def analyze_trace(path_or_trace, *, kernel_wait_us: float = DEFAULT_KERNEL_WAIT_US,
                  step_pattern: str | None = None, small_bytes: int = SMALL_BYTES,
                  min_count: int = MIN_COUNT, include_last_profiler_step: bool = False,
                  top: int | None = None, skip_malformed: bool = False, cache: bool = True,
                  jobs: int = 1) -> Analysis:
    """Analyse a Kineto trace (path or ``Trace``): idle bubbles, causes, host call sites, copies, steps.

    ``kernel_wait_us``: gaps shorter than this with the next op already queued are kernel wait (us).
    ``step_pattern``: regex for step spans (None: ``ProfilerStep#N``, else vLLM's
    ``execute_context_*`` / ``execute_model`` markers, see ``labkit.trace.analysis.host.steps``).
    ``small_bytes``/``min_count``: the small pageable copy rule.
    ``top``: keep only the top call sites in ``host_starvation`` (None: all).
    ``skip_malformed``: read a trace even when more than 0.1% of its events are malformed
    (``labkit.trace.read.load``); ``summary["malformed_events"]`` counts the skipped ones.
    ``cache``: for a path, reuse the analysis of the same unchanged file with the same options
    from earlier in this process (a notebook draws one trace in several figures); traces of more
    than ``CACHE_MAX_EVENTS`` events are never kept. Treat a returned ``Analysis`` as read-only.
    ``jobs``: processes reading a large file (``labkit.trace.read.load.load_trace``).
    """
    key = _cache_key(path_or_trace, (kernel_wait_us, step_pattern, small_bytes, min_count,
                                     include_last_profiler_step, top, skip_malformed)) if cache else None
    if key is not None and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    an = _analyze(path_or_trace, kernel_wait_us=kernel_wait_us, step_pattern=step_pattern, small_bytes=small_bytes,
                  min_count=min_count, include_last_profiler_step=include_last_profiler_step, top=top,
                  skip_malformed=skip_malformed, cache=cache, jobs=jobs)
    if key is not None and len(an.trace.events) <= CACHE_MAX_EVENTS:
        _CACHE[key] = an
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return an


# analyses kept per process, and the largest trace kept: the loader's limits (``labkit.trace.read.load``)
CACHE_SIZE, CACHE_MAX_EVENTS = _load.CACHE_SIZE, _load.CACHE_MAX_EVENTS
_CACHE: OrderedDict = OrderedDict()


def _cache_key(path_or_trace, options: tuple):
    if not isinstance(path_or_trace, (str, os.PathLike)):
        return None
    try:
        st = os.stat(path_or_trace)
        return (os.path.realpath(path_or_trace), st.st_mtime_ns, st.st_size, options)
    except OSError:
        return None  # the loader says what is wrong


def _analyze(path_or_trace, *, kernel_wait_us, step_pattern, small_bytes, min_count, include_last_profiler_step,
             top, skip_malformed, cache, jobs) -> Analysis:
    trace = as_trace(path_or_trace, skip_malformed=skip_malformed, cache=cache, jobs=jobs)
    ops = device_ops(trace)
    steps, step_info = detect_steps(trace, step_pattern)
    bubbles = find_bubbles(trace, ops=ops, steps=steps, kernel_wait_us=kernel_wait_us)
    starvation, top_site = host_starvation(trace, bubbles, top=top)
    site = top_site.to_dict()
    bubbles = bubbles.assign(call_site=np.array([site.get(i, "") for i in bubbles.index], dtype=object)) \
        .reset_index(drop=True)
    streams = stream_idle(ops, bubbles)
    replays = graph_replays(trace, ops)
    ops = ops.assign(replay=replay_index(ops, replays))  # each device op's graph replay (-1: none)
    gaps = device_gaps(ops, replays, kernel_wait_us=kernel_wait_us)
    per_stream = streams.groupby("device")["idle_us"].sum().to_dict() if len(streams) else {}
    devices = device_idle(ops, gaps, per_stream)
    copies = copy_report(trace, ops, steps, small_bytes=small_bytes, min_count=min_count)
    hta = hta_idle_breakdown(trace, consecutive_kernel_delay=kernel_wait_us,
                             include_last_profiler_step=include_last_profiler_step)
    threads = host_thread_time(trace)
    summary = {
        "device_ops_count": int(len(ops)),
        "streams_count": int(len(streams)),
        "busy_us": float(streams["busy_us"].sum()) if len(streams) else 0.0,
        "idle_us": float(streams["idle_us"].sum()) if len(streams) else 0.0,
        "idle_host_wait_us": float(streams["idle_host_wait_us"].sum()) if len(streams) else 0.0,
        "idle_kernel_wait_us": float(streams["idle_kernel_wait_us"].sum()) if len(streams) else 0.0,
        "idle_other_us": float(streams["idle_other_us"].sum()) if len(streams) else 0.0,
        "bubbles_count": int(len(bubbles)),
        "host_busy_us": float(threads["busy_us"].sum()) if len(threads) else 0.0,
        "steps_count": int(len(steps)),
        "steps_source": step_info["source"],
        "h2d_count": int(len(copies.h2d)),
        "pageable_h2d_count": int((copies.h2d["kind"] == "pageable").sum()),
        "flags_count": len(copies.flags),
        "malformed_events": int(trace.stats.skipped),
        "device_idle_us": float(devices["idle_us"].sum()) if len(devices) else 0.0,
        "graph_launches_count": int(len(replays)),
        "graph_ops_count": int(replays["ops_count"].sum()) if len(replays) else 0,
    }
    params = {"kernel_wait_us": kernel_wait_us, "step_pattern": step_info["pattern"], "small_bytes": small_bytes,
              "min_count": min_count, "include_last_profiler_step": include_last_profiler_step}
    return Analysis(source=describe_source(trace, ops), streams=streams, bubbles=bubbles,
                    host_starvation=starvation, copies=copies, steps=steps_table(steps, ops, bubbles),
                    hta_compatible=hta, host_threads=threads, kernels=kernel_stats(ops), summary=summary,
                    params=params, trace=trace, ops=ops, replays=replays, devices=devices, device_gaps=gaps,
                    step_info=step_info, step_phases=step_phases(trace, steps),
                    host_sites=None if trace.has_device_events() else between_step_call_sites(trace, steps, top=top),
                    engine_phases=engine_phase_table(trace))
