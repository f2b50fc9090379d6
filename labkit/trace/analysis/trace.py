"""The trace analyzer's one entry point: ``Trace(path)``, each table computed on first use and kept.

The JSON document: docs/analyze-json.md.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd

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
from labkit.trace.read.load import DEVICE_CATS, EventTables, as_trace

SCHEMA = 1


def _kept(method):
    """A table method computed on its first call and kept on the instance (nothing global)."""
    @functools.wraps(method)
    def table(self):
        if method.__name__ not in self._done:
            self._done[method.__name__] = method(self)
        return self._done[method.__name__]
    return table


class Trace:
    """One profiler trace, read once; each table is computed on first use (treat them as read-only).

    ``kernel_wait_us``: gaps shorter than this (us) with the next op queued are kernel wait;
    ``step_pattern``: regex for step spans (None: the step finder's markers); ``small_bytes`` /
    ``min_count``: the small pageable copy rule; ``skip_malformed``: read a trace even when more than
    0.1% of its events are malformed; ``jobs``: processes reading a large file. The tables:
    docs/trace-analyzer.md ("In Python").
    """

    def __init__(self, source, *, kernel_wait_us: float = DEFAULT_KERNEL_WAIT_US, step_pattern: str | None = None,
                 small_bytes: int = SMALL_BYTES, min_count: int = MIN_COUNT,
                 include_last_profiler_step: bool = False, skip_malformed: bool = False, jobs: int = 1) -> None:
        self.tables: EventTables = as_trace(source, skip_malformed=skip_malformed, jobs=jobs)
        self.kernel_wait_us, self.step_pattern = kernel_wait_us, step_pattern
        self.small_bytes, self.min_count = small_bytes, min_count
        self.include_last_profiler_step = include_last_profiler_step
        self._done: dict = {}

    def __repr__(self) -> str:
        return f"Trace({self.tables.path or '<document>'!r}, {len(self.tables.events)} events)"

    @property
    def params(self) -> dict:
        """The options used (``step_pattern`` as the detected steps report it)."""
        return {"kernel_wait_us": self.kernel_wait_us, "step_pattern": self.step_detection()["pattern"],
                "small_bytes": self.small_bytes, "min_count": self.min_count,
                "include_last_profiler_step": self.include_last_profiler_step}

    @_kept
    def _raw_ops(self) -> pd.DataFrame:
        return device_ops(self.tables)

    @_kept
    def _detected(self) -> tuple[pd.DataFrame, dict]:
        return detect_steps(self.tables, self.step_pattern)

    @_kept
    def _starved(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        bubbles = find_bubbles(self.tables, ops=self._raw_ops(), steps=self._detected()[0],
                               kernel_wait_us=self.kernel_wait_us)
        starvation, top_site = host_starvation(self.tables, bubbles)
        site = top_site.to_dict()
        bubbles = bubbles.assign(call_site=np.array([site.get(i, "") for i in bubbles.index], dtype=object))
        return bubbles.reset_index(drop=True), starvation

    def bubbles(self) -> pd.DataFrame:
        """Idle gaps on each stream, their category and the launching thread's call site meanwhile."""
        return self._starved()[0]

    def call_sites(self) -> pd.DataFrame:
        """Host call sites ranked by the host-wait idle they overlap (``share`` of all host-wait idle)."""
        return self._starved()[1]

    @_kept
    def idle(self) -> pd.DataFrame:
        """Per device stream: ops, span, busy and idle time split by cause (host wait, kernel wait, other)."""
        return stream_idle(self._raw_ops(), self.bubbles())

    @_kept
    def replays(self) -> pd.DataFrame:
        """CUDA-graph replays, one row per launch (``labkit.trace.analysis.device.cuda_graphs``)."""
        return graph_replays(self.tables, self._raw_ops())

    @_kept
    def ops(self) -> pd.DataFrame:
        """Device ops (kernels, copies, memsets), each with its graph ``replay`` (-1: none)."""
        ops = self._raw_ops()
        return ops.assign(replay=replay_index(ops, self.replays()))

    @_kept
    def device_gaps(self) -> pd.DataFrame:
        """Gaps when no stream of a device is busy (replays counted as the work they launch)."""
        return device_gaps(self.ops(), self.replays(), kernel_wait_us=self.kernel_wait_us)

    @_kept
    def devices(self) -> pd.DataFrame:
        """Idle per device, real gaps only."""
        streams = self.idle()
        per_stream = streams.groupby("device")["idle_us"].sum().to_dict() if len(streams) else {}
        return device_idle(self.ops(), self.device_gaps(), per_stream)

    @_kept
    def copies(self) -> CopyReport:
        """Every copy, the host-to-device ones per step and call site, and the small pageable copy flags."""
        return copy_report(self.tables, self.ops(), self._detected()[0], small_bytes=self.small_bytes,
                           min_count=self.min_count)

    def h2d(self) -> pd.DataFrame:
        """Host-to-device copies (rows of ``copies().copies`` with direction HtoD)."""
        return self.copies().h2d

    @_kept
    def steps(self) -> pd.DataFrame:
        """Per step: host span, device ops and busy time launched in it, idle by cause."""
        return steps_table(self._detected()[0], self.ops(), self.bubbles())

    def step_detection(self) -> dict:
        """How steps were found (``labkit.trace.analysis.host.steps.detect_steps``)."""
        return self._detected()[1]

    @_kept
    def step_phases(self) -> pd.DataFrame:
        """Host time per annotated model-runner phase per step."""
        return step_phases(self.tables, self._detected()[0])

    @_kept
    def engine_phases(self) -> pd.DataFrame:
        """vLLM's whole engine steps by phase (``labkit.trace.analysis.host.engine_steps``)."""
        return engine_phase_table(self.tables)

    @_kept
    def host_call_sites(self) -> pd.DataFrame | None:
        """Host-only traces: the call sites between steps (None for a trace with device events)."""
        return None if self.tables.has_device_events() else between_step_call_sites(self.tables, self._detected()[0])

    @_kept
    def hta_compatible(self) -> pd.DataFrame:
        """HTA's idle-time breakdown of the same trace, with HTA's conventions."""
        return hta_idle_breakdown(self.tables, consecutive_kernel_delay=self.kernel_wait_us,
                                  include_last_profiler_step=self.include_last_profiler_step)

    @_kept
    def host_threads(self) -> pd.DataFrame:
        """Per host thread: event count, span and busy time (the union of its events)."""
        return host_thread_time(self.tables)

    @_kept
    def kernels(self) -> pd.DataFrame:
        """Per device-op name: count, total and mean time (by total time)."""
        return kernel_stats(self.ops())

    @_kept
    def source(self) -> dict:
        """File name, GPU, simulated or measured, rank and load statistics."""
        return describe_source(self.tables, self._raw_ops())

    @_kept
    def summary(self) -> dict:
        """Totals over the tables (the ``summary`` of ``labkit analyze --json``)."""
        streams, threads, replays, devices = self.idle(), self.host_threads(), self.replays(), self.devices()
        h2d = self.h2d()
        return {
            "device_ops_count": int(len(self._raw_ops())),
            "streams_count": int(len(streams)),
            **{k: float(streams[k].sum()) if len(streams) else 0.0
               for k in ("busy_us", "idle_us", "idle_host_wait_us", "idle_kernel_wait_us", "idle_other_us")},
            "bubbles_count": int(len(self.bubbles())),
            "host_busy_us": float(threads["busy_us"].sum()) if len(threads) else 0.0,
            "steps_count": int(len(self._detected()[0])),
            "steps_source": self.step_detection()["source"],
            "h2d_count": int(len(h2d)),
            "pageable_h2d_count": int((h2d["kind"] == "pageable").sum()),
            "flags_count": len(self.copies().flags),
            "malformed_events": int(self.tables.stats.skipped),
            "device_idle_us": float(devices["idle_us"].sum()) if len(devices) else 0.0,
            "graph_launches_count": int(len(replays)),
            "graph_ops_count": int(replays["ops_count"].sum()) if len(replays) else 0,
        }

    def to_json(self, top: int = 20) -> dict:
        """The document of ``labkit analyze --json`` (docs/analyze-json.md), lists cut to ``top``."""
        big = self.bubbles().sort_values("dur_us", ascending=False, kind="stable").head(top)
        h2d, copies = self.h2d(), self.copies()
        return _clean({
            "schema": SCHEMA,
            "source": self.source(),
            "params": self.params,
            "summary": self.summary(),
            "streams": _records(self.idle()),
            "bubbles": _records(big),
            "host_starvation": _records(self.call_sites().head(top)),
            "h2d": {
                "count": int(len(h2d)),
                "pageable_count": int((h2d["kind"] == "pageable").sum()),
                "pinned_count": int((h2d["kind"] == "pinned").sum()),
                "total_bytes": int(h2d["bytes"].clip(lower=0).sum()),
                "host_stall_us": float(h2d["host_stall_us"].sum()),
                "copies": _records(h2d.rename(columns={"bytes": "size_bytes"}).head(1000)),
                "per_step": _records(copies.by_step),
                "per_call_site": _records(copies.by_call_site.rename(columns={"bytes": "total_bytes"})),
                "flags": copies.flags,
                "other_copies": _records(copies.copies[copies.copies["direction"] != "HtoD"]
                                         .groupby(["direction", "kind"], as_index=False)
                                         .agg(count=("bytes", "size"), total_bytes=("bytes", "sum"))),
            },
            "steps": _records(self.steps()),
            "step_detection": self.step_detection(),
            "step_phases": _records(self.step_phases()),
            "devices": _records(self.devices()),
            "graphs": self._graphs_json(top),
            "hta_compatible": _records(self.hta_compatible()),
            "host_threads": _records(self.host_threads()),
            "kernels": _records(self.kernels().head(top)),
            "host_call_sites": _records(self.host_call_sites().head(top)) if not self.tables.has_device_events() else [],
            "engine_steps": _records(self.engine_phases()),
        })

    def _graphs_json(self, top: int) -> dict:
        r = self.replays()
        if len(r) == 0:
            return {"launches_count": 0, "recorded_count": 0, "unrecorded_count": 0, "ops_count": 0, "replays": []}
        rec = r[r["recorded"]]
        return {"launches_count": int(len(r)), "recorded_count": int(len(rec)),
                "unrecorded_count": int(len(r) - len(rec)), "ops_count": int(r["ops_count"].sum()),
                "busy_us": float(rec["busy_us"].sum()), "gaps_us": float(rec["gaps_us"].sum()),
                "launch_to_start_us_median": float(rec["launch_to_start_us"].median()) if len(rec) else None,
                "replays": _records(r.sort_values("span_us", ascending=False, kind="stable").head(top))}

    def _step_lines(self, top: int) -> list[str]:
        info = self.step_detection()
        if info.get("note"):
            return [f"note: {info['note']}"]
        steps = self.steps()
        if len(steps) == 0:
            return []
        runner = f", model runner {info['model_runner']}" if info.get("model_runner") else ""
        shown = min(top, len(steps))
        out = [f"steps: {len(steps)} from {info.get('source')} markers{runner} (first {shown}):",
               f"{'step':>5} {'host_ms':>9} {'ops':>6} {'busy_ms':>9} {'host_wait':>9} {'kern_wait':>9} {'other':>9}"
               "  phases (host ms)"]
        ph = self.step_phases()
        for r in steps.head(top).itertuples():
            p = ph[ph["step"] == r.step].sort_values("host_us", ascending=False, kind="stable").head(4)
            phases = ", ".join(f"{x.phase[:28]} {x.host_us / 1e3:.2f}" for x in p.itertuples())
            out.append(f"{r.step:>5} {r.dur_us / 1e3:>9.3f} {r.ops_count:>6} {r.device_busy_us / 1e3:>9.3f} "
                       f"{r.idle_host_wait_us / 1e3:>9.3f} {r.idle_kernel_wait_us / 1e3:>9.3f} "
                       f"{r.idle_other_us / 1e3:>9.3f}  {phases}")
        return out

    def _engine_lines(self) -> list[str]:
        table = self.engine_phases()
        if len(table) == 0:
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
        s = self.source()
        out = [f"trace: {s['file']}  ({s['kind']}; GPU: {s.get('gpu') or 'none recorded'})"]
        if s.get("skipped_events"):
            out.append(f"malformed events skipped: {s['skipped_events']} of {s['events']} ({s['skip_reasons']})")
        if not s["has_device_events"]:
            out.append("no device events in this trace: host time only")
        for r in self.host_threads().head(top).itertuples():
            out.append(f"  host thread {r.pid}/{r.tid}: busy {r.busy_us / 1e3:.3f} ms of {r.span_us / 1e3:.3f} ms")
        streams = self.idle()
        if len(streams):
            out.append(f"{'device':>6} {'stream':>6} {'ops':>7} {'busy_ms':>10} {'idle_ms':>10} {'host_wait':>10} "
                       f"{'kern_wait':>10} {'other':>10} {'idle%':>6}")
            for r in streams.itertuples():
                out.append(f"{r.device:>6} {r.stream:>6} {r.ops_count:>7} {r.busy_us / 1e3:>10.3f} {r.idle_us / 1e3:>10.3f} "
                           f"{r.idle_host_wait_us / 1e3:>10.3f} {r.idle_kernel_wait_us / 1e3:>10.3f} "
                           f"{r.idle_other_us / 1e3:>10.3f} {100 * r.idle_fraction:>6.1f}")
        devices, replays = self.devices(), self.replays()
        if len(devices) and (len(replays) or (devices["streams_count"] > 1).any()):
            out.append("per device (real gaps only: no stream busy; unrecorded = where unrecorded graph replays ran):")
            for r in devices.itertuples():
                out.append(f"  device {r.device}: busy {r.busy_us / 1e3:.3f} ms, idle {r.idle_us / 1e3:.3f} ms "
                           f"({100 * r.idle_fraction:.1f}%), unrecorded {r.unrecorded_us / 1e3:.3f} ms; "
                           f"per-stream idle summed would say {r.per_stream_idle_sum_us / 1e3:.3f} ms")
        if len(replays):
            g = self._graphs_json(top)
            out.append(f"CUDA graphs: {g['launches_count']} replays ({g['unrecorded_count']} without recorded ops), "
                       f"{g['ops_count']} ops, idle inside replays {g['gaps_us'] / 1e3:.3f} ms")
        out.extend(self._step_lines(top))
        out.extend(self._engine_lines())
        sites = self.host_call_sites()
        if sites is not None and len(sites):
            out.append(f"host call sites between steps (no device stream; top {top}):")
            for r in sites.head(top).itertuples():
                out.append(f"  {r.host_us / 1e3:>9.3f} ms {100 * r.share:>5.1f}%  {r.call_site[:100]}")
        starved = self.call_sites()
        if len(starved):
            out.append(f"host call sites during host-wait idle (top {top}):")
            for r in starved.head(top).itertuples():
                out.append(f"  {r.idle_overlap_us / 1e3:>9.3f} ms {100 * r.share:>5.1f}%  {r.call_site[:100]}")
        h = self.h2d()
        if len(h):
            out.append(f"H2D copies: {len(h)} ({int((h['kind'] == 'pageable').sum())} pageable, "
                       f"{int((h['kind'] == 'pinned').sum())} pinned), host stall {h['host_stall_us'].sum() / 1e3:.3f} ms")
        for f in self.copies().flags[:top]:
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


def host_thread_time(trace: EventTables) -> pd.DataFrame:
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


def describe_source(trace: EventTables, ops: pd.DataFrame) -> dict:
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
