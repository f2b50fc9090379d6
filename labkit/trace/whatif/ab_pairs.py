"""Checking ``labkit whatif`` against measured A/B pairs of the lab's engine.

Each ``AB_CASES`` entry is a pair of engine variants that differ in one host cost, and the
what-if that should turn the first run into the second:

* ``tensor->list`` (#40143): scale ``^schedule$`` by the ratio of the two runs' median
  ``schedule`` spans;
* ``per_layer->per_step`` (#38794): make the synchronizing calls inside the layers
  non-blocking and scale the layers' host work by the ratio of the two runs' median
  ``forward/layer_i`` host work (the per-layer copies are made inside those spans).

Ratios compare host *work*: a span's time minus what synchronizing calls inside it spent
waiting for the device (``host_work_us``), since the replay, not the scale, decides the waits.

``predict_pair(before, after, case)`` replays the first trace with that change and sets the
prediction beside the second trace's measured median step time. ``lab_pairs(root)`` finds the
recorded pairs (``data/traces/<gpu>/<variant>/``); ``make_sim_pairs(dir)`` records them on the
simulated device with ``HostCostClock``, a fixed host-cost model (every Python call costs
``call_ns``, the placeholder reads cost what ``labkit calibrate`` measured), so the simulated
host time does not depend on how fast or how loaded the machine is. ``bubble_model_rows`` puts
#40143's published figures next to the answer through the bubble model (``labkit.mm.overlap``).
"""

from __future__ import annotations

import contextlib
import logging
from bisect import bisect_left
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labkit.errors import UsageError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ABCase:
    """A before/after pair of engine variants and the what-if between them."""

    name: str
    before: tuple  #: (placeholder, scheduling, prefix_ranges)
    after: tuple
    scale: str  #: regex of the host spans scaled by the after/before ratio of their medians
    unsync: str | None = None  #: regex of the synchronizing calls made non-blocking


AB_CASES = {
    "tensor->list": ABCase("tensor->list", ("tensor", "loop", "none"), ("list", "loop", "none"), r"^schedule$"),
    "per_layer->per_step": ABCase("per_layer->per_step", ("fast", "cursor", "per_layer"),
                                  ("fast", "cursor", "per_step"), r"^forward/layer_\d+$", r"^forward/layer_\d+$"),
}


def variant_dir(v: tuple, async_scheduling: bool = True) -> str:
    """The trace folder name the engine writes for a variant, e.g. ``tensor-loop-none-async``."""
    return "-".join([*v, "async" if async_scheduling else "sync"])


def span_durations_us(trace, pattern: str) -> list[float]:
    """Durations (us) of the host spans of ``trace`` (path or Trace) whose name matches ``pattern``."""
    from labkit.trace.read.load import as_trace
    from labkit.trace.whatif.dependency_graph import trace_records

    rec = trace_records(as_trace(trace))
    rx = re.compile(pattern)
    d = [s.end - s.start for spans in rec.threads.values() for s in spans if s.corr < 0 and rx.search(s.name)]
    if not d:
        raise UsageError(f"no host span matches {pattern!r} in {rec.file}")
    return d


def host_work_us(trace, pattern: str) -> list[float]:
    """Per host span matching ``pattern``: its duration minus the time synchronizing calls inside it
    spent waiting for the device (us): the span's own host cost, the quantity ``--scale`` scales
    (waits from the same dependency graph the replay uses)."""
    from labkit.trace.read.load import as_trace
    from labkit.trace.whatif.dependency_graph import trace_graph

    rec, g = trace_graph(as_trace(trace))
    rx = re.compile(pattern)
    hit: dict = {}  # span name -> matches (names repeat thousands of times)
    out = []
    for key, spans in rec.threads.items():
        syncs = g.syncs.get(key, [])
        starts = [c.start for c in syncs]
        waits = np.cumsum([0.0] + [(c.end - c.start) - c.cost for c in syncs]).tolist()
        for s in spans:
            if s.corr >= 0:
                continue
            m = hit.get(s.name)
            if m is None:
                m = hit[s.name] = rx.search(s.name) is not None
            if m:
                lo, hi = bisect_left(starts, s.start), bisect_left(starts, s.end)
                out.append(s.end - s.start - float(waits[hi] - waits[lo]))
    if not out:
        raise UsageError(f"no host span matches {pattern!r} in {rec.file}")
    return out


def median_span_us(trace, pattern: str) -> float:
    """Median duration (us) of the host spans of ``trace`` whose name matches ``pattern``."""
    return float(np.median(span_durations_us(trace, pattern)))


def predict_pair(before, after, case: str | ABCase) -> dict:
    """Replay ``before`` (path or Trace) with ``case``'s change; return one row with the prediction
    beside ``after``'s measured median step (``error`` = predicted / measured - 1)."""
    from labkit.trace.read.load import as_trace
    from labkit.trace.whatif.predict import Change, predict

    c = AB_CASES[case] if isinstance(case, str) else case
    tb, ta = as_trace(before), as_trace(after)
    ratio = float(np.median(host_work_us(ta, c.scale)) / np.median(host_work_us(tb, c.scale)))
    changes = [Change("scale", c.scale, ratio)] + ([Change("unsync", c.unsync)] if c.unsync else [])
    w = predict(tb, changes)
    m_after = predict(ta)
    pred = w.predicted["step_ms_median"]
    meas = m_after.measured["step_ms_median"]
    return {"case": c.name, "source": w.source["kind"], "gpu": w.source.get("gpu"), "scale_pattern": c.scale,
            "scale_factor": ratio, "unsync_pattern": c.unsync,
            "before_step_ms": w.measured["step_ms_median"], "predicted_after_step_ms": pred,
            "measured_after_step_ms": meas, "error": pred / meas - 1.0,
            "before_idle_frac": w.measured["device_idle_frac"],
            "predicted_after_idle_frac": w.predicted["device_idle_frac"],
            "measured_after_idle_frac": m_after.measured["device_idle_frac"],
            "replay_check_before": w.replay_check["step_ms_error"],
            "replay_check_after": m_after.replay_check["step_ms_error"],
            # host time per step the scale removes (ms): scaled spans per step x (1 - factor)
            "host_saving_ms": sum(host_work_us(tb, c.scale)) * (1 - ratio) / w.steps["count"] / 1e3,
            "whatif": w.to_json()}


def lab_pairs(root: str | Path) -> dict:
    """``{case: (before trace, after trace)}`` for the pairs recorded under ``root`` (one folder per variant)."""
    root = Path(root)
    out = {}
    for name, c in AB_CASES.items():
        files = [sorted((root / variant_dir(v)).glob("*.pt.trace.json*")) for v in (c.before, c.after)]
        if all(files):
            out[name] = (files[0][0], files[1][0])
    return out


class HostCostClock:
    """A fixed host-cost model for ``SimDevice(clock=...)``: host time advances only by counted work.

    While ``active()``, every Python-level call costs ``call_ns`` and a call of a function whose
    qualified name is in ``extra_ns`` costs that much more (e.g. one tensor read + ``int()`` per
    ``TensorPlaceholderRange.get_num_embeds``). Host time then follows the work done, not the
    machine's speed or load (first calls in a process, imports and caches, still add work).
    """

    def __init__(self, call_ns: float = 100.0, extra_ns: dict | None = None) -> None:
        self.call_ns = float(call_ns)
        self.extra_ns = dict(extra_ns or {})
        self.t = 0.0

    def _hook(self, frame, event, arg) -> None:
        if event == "call":
            code = frame.f_code
            self.t += self.call_ns + self.extra_ns.get(getattr(code, "co_qualname", code.co_name), 0.0)
        elif event == "c_call":
            self.t += self.call_ns

    def __call__(self) -> int:
        return int(self.t)

    @contextlib.contextmanager
    def active(self):
        old = sys.getprofile()
        sys.setprofile(self._hook)
        try:
            yield self
        finally:
            sys.setprofile(old)


def placeholder_read_costs_ns() -> dict:
    """``extra_ns`` for ``HostCostClock``: the placeholder reads at the unit costs ``labkit calibrate``
    recorded (``list_index``, ``tensor_index_int`` rows of the first calibration result found)."""
    from labkit.results import load_results

    for res in load_results():
        if res.name.split("_quick")[0] != "calibration":
            continue
        rows = {r.get("variant"): r.get("median_ns") for r in res.rows if r.get("kind") == "cpu"}
        if rows.get("list_index") and rows.get("tensor_index_int"):
            t, li = float(rows["tensor_index_int"]), float(rows["list_index"])
            return {"TensorPlaceholderRange.get_num_embeds": t,
                    "TensorPlaceholderRange.get_embeds_indices_in_range": 2 * t,
                    "ListPlaceholderRange.get_num_embeds": li,
                    "ListPlaceholderRange.get_embeds_indices_in_range": 2 * li}
    raise UsageError("no calibration result with list/tensor read costs: run `labkit calibrate` first")


def make_sim_pairs(out_dir: str | Path, cases=tuple(AB_CASES), *, model: str = "tiny", num_requests: int = 16,
                   profile: str = "h200", steps: int = 4, call_ns: float = 100.0) -> dict:
    """Record each case's two variants on the simulated device under ``HostCostClock``;
    returns ``{case: (before trace, after trace)}``. ``steps`` profiled steps after 2 waiting and 1 warm-up."""
    from labkit.attn.prefix_ranges import warm_up
    from labkit.engine.config import EngineConfig
    from labkit.engine.devices import SimDevice
    from labkit.engine.loop import Engine
    from labkit.engine.profiles import load_profile
    from labkit.trace.capture import make_capture

    prof = load_profile(profile)
    extra = placeholder_read_costs_ns()
    warm_up()  # torch's first-use imports stay outside the clock (each call there is charged)
    out = {}
    paths: dict = {}
    for name in cases:
        c = AB_CASES[name]
        for v in (c.before, c.after):
            if v in paths:
                continue
            clock = HostCostClock(call_ns, extra)
            cfg = EngineConfig(model=model, workload="pr40143", num_requests=num_requests, placeholder=v[0],
                               scheduling=v[1], prefix_ranges=v[2])
            meta = {"variant": cfg.variant_name(), "async_scheduling": True, "host_cost_model":
                    f"HostCostClock(call_ns={call_ns:g}, placeholder reads from calibration)"}
            with clock.active():
                dev = SimDevice(prof, clock=clock)
                eng = Engine(cfg, dev)
                cap = make_capture(dev, out_dir, variant_dir(v), metadata=meta, wait=2, warmup=1, active=steps)
                with cap:
                    eng.run(3 + steps, capture=cap)
            paths[v] = Path(cap.paths[0])
        out[name] = (paths[c.before], paths[c.after])
    return out


def bubble_model_rows(pair_row: dict, *, non_overlap_ms: float = 1.0) -> list[dict]:
    """#40143's published figures beside the answers: the bubble model fed with the host saving the
    what-if removed (``compare_with_published``), and the what-if's own before/after step ratio."""
    from labkit.mm.overlap import PR40143, compare_with_published

    cmp = compare_with_published(pair_row["host_saving_ms"], non_overlap_ms=non_overlap_ms)
    rows = [dict(r, model="bubble model (published shape)") for r in cmp.as_rows()]
    ratio_pub = PR40143.mean_tpot_ms_after / PR40143.mean_tpot_ms_before
    rows.append({"quantity": "tpot_after / tpot_before", "published": ratio_pub,
                 "predicted": pair_row["predicted_after_step_ms"] / pair_row["before_step_ms"],
                 "error_pct": None, "model": f"whatif on the lab trace ({pair_row['source']})"})
    rows.append({"quantity": "tpot_after / tpot_before", "published": ratio_pub,
                 "predicted": pair_row["measured_after_step_ms"] / pair_row["before_step_ms"],
                 "error_pct": None, "model": f"measured on the lab engine ({pair_row['source']})"})
    return rows


def ab_table(root: str | Path | None = None, *, sim_dir: str | Path | None = None):
    """One row per A/B pair (recorded under ``root`` and, with ``sim_dir``, recorded there on the
    simulated device): predicted vs measured median step, as a DataFrame (no per-pair JSON)."""
    import pandas as pd

    rows = []
    for where in [r for r in (root,) if r is not None]:
        for case, (b, a) in lab_pairs(where).items():
            rows.append(predict_pair(b, a, case))
    if sim_dir is not None:
        for case, (b, a) in make_sim_pairs(sim_dir).items():
            rows.append(predict_pair(b, a, case))
    cols = ["case", "source", "scale_factor", "before_step_ms", "predicted_after_step_ms", "measured_after_step_ms",
            "error", "predicted_after_idle_frac", "measured_after_idle_frac", "replay_check_before", "host_saving_ms"]
    return pd.DataFrame([{k: r[k] for k in cols} for r in rows], columns=cols), rows


def plot_ab(table):
    """Bars per pair: the first run, the prediction for the second, and the second as measured (ms)."""
    import plotly.graph_objects as go

    x = [f"{r.case}<br>({r.source})" for r in table.itertuples()]
    fig = go.Figure()
    for col, label in (("before_step_ms", "before (measured)"), ("predicted_after_step_ms", "after (whatif)"),
                       ("measured_after_step_ms", "after (measured)")):
        fig.add_bar(x=x, y=table[col], name=label)
    fig.update_layout(barmode="group", yaxis_title="median step (ms)", yaxis_type="log",
                      title="labkit whatif: one run + the change -> the other run (source per pair)")
    return fig
