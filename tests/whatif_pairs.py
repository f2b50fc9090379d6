"""The engine's A/B pairs the what-if is checked against (test scaffolding): which variants, their
trace folders, the change derived from the first run alone, and the pairs recorded on the simulated
device under a fixed host-cost model (``HostCostClock``). The method: docs/trace-analyzer.md.
"""

from __future__ import annotations

import contextlib
import re
import sys
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labkit.attn.prefix_ranges import make_strategy, warm_up
from labkit.engine.config import EngineConfig
from labkit.engine.device.devices import SimDevice
from labkit.engine.device.profiles import load_profile
from labkit.engine.loop import Engine
from labkit.errors import UsageError
from labkit.results import load_results
from labkit.trace.analysis.host.steps import find_step_spans
from labkit.engine.device.sim_trace import device_capture
from labkit.trace.capture import trace_path
from labkit.trace.read.load import as_trace
from labkit.trace.whatif.changes import Change
from labkit.trace.whatif.dependency_graph import trace_graph, trace_records
from labkit.trace.whatif.predict import predict
from labkit.trace.whatif.reads import read_cost_ns



@dataclass(frozen=True)
class ABCase:
    """A before/after pair of engine variants (``(placeholder, scheduling, prefix_ranges)``)."""

    name: str
    before: tuple
    after: tuple
    what: str  #: the difference, in words


AB_CASES = {
    "tensor->list": ABCase("tensor->list", ("tensor", "loop", "none"), ("list", "loop", "none"),
                           "placeholder reads from a Python list instead of a tensor (#40143)"),
    "per_layer->per_step": ABCase("per_layer->per_step", ("fast", "cursor", "per_layer"),
                                  ("fast", "cursor", "per_step"),
                                  "the prefix-range copies made once per step instead of per row and layer (#38794)"),
}


def variant_dir(v: tuple, async_scheduling: bool = True) -> str:
    """The trace folder name the engine writes for a variant, e.g. ``tensor-loop-none-async``."""
    return "-".join([*v, "async" if async_scheduling else "sync"])


def base_case(case: str) -> ABCase:
    """The ``AB_CASES`` entry of ``case`` (a simulated pair's name may end in ``/<cudagraph mode>``)."""
    return AB_CASES[case.split("/")[0]]


SCHEDULE = r"^schedule$"
LAYERS = r"^forward/layer_\d+$"
#: host spans that are placeholder reads, and how many reads each is: a tensor read's ``int()``
#: in a torch.profiler trace, the simulated host's marks (``sim_pairs.READ_CALLS``)
READ_SPANS = ((re.compile(r"^aten::item$"), 1),
              (re.compile(r"^TensorPlaceholderRange\.get_num_embeds$"), 1),
              (re.compile(r"^TensorPlaceholderRange\.get_embeds_indices_in_range$"), 2))


def host_work_us(trace, pattern: str) -> list[float]:
    """Per host span matching ``pattern``: its duration minus the time synchronizing calls inside it
    spent waiting for the device (us): the span's own host cost, the quantity ``--scale`` scales
    (waits from the same dependency graph the replay uses)."""

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


def reads_per_step(trace, within: str = SCHEDULE) -> list[int]:
    """Placeholder reads (``READ_SPANS``) inside the spans matching ``within``, per step of ``trace``."""

    rec = trace_records(as_trace(trace))
    steps, _ = find_step_spans(rec)
    if not steps:
        raise UsageError(f"{rec.file}: no steps to count placeholder reads in")
    starts = [s.start for _, s in steps]
    counts = [0] * len(steps)
    rx = re.compile(within)
    for spans in rec.threads.values():
        outer = [s for s in spans if s.corr < 0 and rx.search(s.name)]
        o_starts = [s.start for s in outer]
        for s in spans:
            reads = next((n for r, n in READ_SPANS if r.match(s.name)), 0)
            if not reads:
                continue
            k = bisect_right(o_starts, s.start) - 1
            if k < 0 or s.end > outer[k].end:
                continue
            j = bisect_right(starts, s.start) - 1
            if j >= 0 and s.start < steps[j][1].end:
                counts[j] += reads
    return counts


def traced_read_cost_ns(trace, within: str = SCHEDULE) -> dict:
    """What one placeholder read costs in ``trace`` itself (``labkit.trace.whatif.reads.read_cost_ns``)."""

    return read_cost_ns(trace_records(as_trace(trace)), within)


def ledger_layer_copies_per_step(strategy: str) -> int:
    """Host-to-device copies one step of prefix-range ``strategy`` makes inside the layers, as the
    ledger records them (copies with a layer index; two rows with images, one without, three
    layers: a per-step strategy's count does not depend on them)."""

    s = make_strategy(strategy, "cpu")
    s.begin_step({0: [(2, 6), (9, 12)], 1: [(1, 3)], 2: []}, 3)
    for layer in range(3):
        s.tensor_for_layer(layer)
    s.end_step()
    return sum(1 for c in s.ledger.copy_rows() if c["layer"] is not None)


def derive_changes(case: str | ABCase, before) -> tuple[list, dict]:
    """The what-if of ``case`` derived from the first run's trace ``before`` (path or Trace) and
    calibration or ledger data, never from the second run: ``(changes, how)`` (see the module docstring)."""

    c = base_case(case) if isinstance(case, str) else case
    tb = as_trace(before)
    if c.before[0] != c.after[0]:  # the placeholder variant changes: cheaper reads
        if tb.is_simulated:  # the calibration the simulated host was charged with
            lab = tb.metadata.get("labkit") if isinstance(tb.metadata.get("labkit"), dict) else {}
            costs, slug = calibration_read_costs(slug=lab.get("host_cost_calibration"))
        else:  # that of the machine that recorded the trace
            costs, slug = calibration_read_costs(gpu=tb.device_names[0] if tb.device_names else "unknown")
        list_ns = costs["ListPlaceholderRange.get_num_embeds"]
        calibrated_ns = costs["TensorPlaceholderRange.get_num_embeds"]
        if tb.is_simulated:
            read_ns, read_from, traced = calibrated_ns, f"calibration {slug} (charged to the simulated host)", None
        else:
            traced = traced_read_cost_ns(tb)
            read_ns, read_from = traced["read_ns"], "trace: median time from one read to the next inside schedule"
        saving_ns = max(0.0, read_ns - list_ns)
        reads = float(np.median(reads_per_step(tb)))
        work = float(np.median(host_work_us(tb, SCHEDULE)))
        factor = max(0.0, 1.0 - reads * saving_ns / 1e3 / work)
        how = {"reads_per_step": reads, "tensor_read_ns": read_ns, "tensor_read_from": read_from,
               "tensor_read_calibrated_ns": calibrated_ns,
               "tensor_read_traced_mean_ns": traced["mean_ns"] if traced else None,
               "list_read_ns": list_ns, "read_saving_ns": saving_ns, "calibration": slug,
               "schedule_host_work_us": work, "scale_factor": factor,
               "host_saving_ms": reads * saving_ns / 1e6}
        return [Change("scale", SCHEDULE, factor)], how
    keep = ledger_layer_copies_per_step(c.after[2])
    return [Change("drop_copies", LAYERS, keep=keep)], {"layer_copies_kept_per_step": keep,
                                                         "ledger_strategy": c.after[2]}


def predict_pair(before, after, case: str | ABCase) -> dict:
    """Replay ``before`` (path or Trace) with the change ``derive_changes`` finds for ``case``; return
    one row with the prediction beside ``after``'s measured median step and device idle fraction
    (``error`` = predicted / measured step - 1, ``idle_error`` = predicted - measured idle)."""

    c = base_case(case) if isinstance(case, str) else case
    tb = as_trace(before)
    changes, how = derive_changes(c, tb)
    w = predict(tb, changes)
    m_after = predict(as_trace(after))  # read for the comparison only
    pred, meas = w.predicted["step_ms_median"], m_after.measured["step_ms_median"]
    p_idle, m_idle = w.predicted["device_idle_frac"], m_after.measured["device_idle_frac"]
    saving = how.get("host_saving_ms")
    if saving is None:  # the copies' host work the drop removes, per step
        saving = (w.measured["step_ms_median"] - pred) if pred is not None else None
    return {"case": case if isinstance(case, str) else c.name, "source": w.source["kind"], "gpu": w.source.get("gpu"),
            "change": " ".join(ch.argument() for ch in changes), "derivation": how,
            "scale_factor": how.get("scale_factor"),
            "before_step_ms": w.measured["step_ms_median"], "predicted_after_step_ms": pred,
            "measured_after_step_ms": meas, "error": pred / meas - 1.0,
            "before_idle_frac": w.measured["device_idle_frac"], "predicted_after_idle_frac": p_idle,
            "measured_after_idle_frac": m_idle,
            "idle_error": (p_idle - m_idle) if p_idle is not None and m_idle is not None else None,
            "replay_check_before": w.replay_check["step_ms_error"],
            "replay_check_after": m_after.replay_check["step_ms_error"],
            "host_saving_ms": saving, "whatif": w.to_json()}


def lab_pairs(root: str | Path) -> dict:
    """``{case: (before trace, after trace)}`` for the pairs recorded under ``root`` (one folder per variant)."""
    root = Path(root)
    out = {}
    for name, c in AB_CASES.items():
        files = [sorted((root / variant_dir(v)).glob("*.pt.trace.json*")) for v in (c.before, c.after)]
        if all(files):
            out[name] = (files[0][0], files[1][0])
    return out


#: (case of ``AB_CASES``, CUDA-graph mode); ``full`` cannot capture ``per_layer`` (copies inside
#: attention), so its graph case is ``piecewise``
SIM_CASES = (("tensor->list", "none"), ("tensor->list", "full"),
             ("per_layer->per_step", "none"), ("per_layer->per_step", "piecewise"))
#: calls whose cost is a placeholder read, and how many reads each makes
READ_CALLS = {"get_num_embeds": 1, "get_embeds_indices_in_range": 2}


def sim_case_name(case: str, cudagraph: str) -> str:
    """``tensor->list`` (eager) or ``tensor->list/full``: the key of a simulated pair."""
    return case if cudagraph == "none" else f"{case}/{cudagraph}"


class HostCostClock:
    """A fixed host-cost model for ``SimDevice(clock=...)`` (see the module docstring).

    While ``active()``, every Python-level call costs ``call_ns`` and a call of a function whose
    qualified name is in ``extra_ns`` costs that much more; ``mark(name, ns)``, when set, is called
    after each such charge (first calls in a process, imports and caches, still add work).
    """

    def __init__(self, call_ns: float = 100.0, extra_ns: dict | None = None, mark=None) -> None:
        self.call_ns = float(call_ns)
        self.extra_ns = dict(extra_ns or {})
        self.mark = mark
        self.t = 0.0

    def _hook(self, frame, event, arg) -> None:
        if event == "call":
            code = frame.f_code
            extra = self.extra_ns.get(getattr(code, "co_qualname", code.co_name), 0.0)
            self.t += self.call_ns + extra
            if extra and self.mark is not None:
                self.mark(getattr(code, "co_qualname", code.co_name), extra)
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


def calibration_read_costs(gpu: str | None = None, slug: str | None = None) -> tuple[dict, str]:
    """``(extra_ns, machine slug)``: the placeholder reads of both variants at the unit costs a
    calibration recorded (``list_index``, ``tensor_index_int``): that of the machine with GPU name
    ``gpu`` or slug ``slug``, else the first one found."""

    found = []
    for res in load_results():
        if res.name.split("_quick")[0] != "calibration":
            continue
        rows = {r.get("variant"): r.get("median_ns") for r in res.rows if r.get("kind") == "cpu"}
        if rows.get("list_index") and rows.get("tensor_index_int"):
            found.append((res, float(rows["tensor_index_int"]), float(rows["list_index"])))
    if gpu is not None:
        found = [f for f in found if f[0].machine.get("gpu_name") == gpu]
    if slug is not None:
        found = [f for f in found if f[0].slug == slug]
    if not found:
        where = f" for {gpu or slug}" if gpu or slug else ""
        raise UsageError(f"no calibration result with list/tensor read costs{where}: run `labkit calibrate` first")
    res, t, li = found[0]
    costs = {}
    for fn, reads in READ_CALLS.items():
        costs[f"TensorPlaceholderRange.{fn}"] = reads * t
        costs[f"ListPlaceholderRange.{fn}"] = reads * li
    return costs, res.slug


def make_sim_pairs(out_dir: str | Path, cases=SIM_CASES, *, model: str = "tiny", num_requests: int = 16,
                   profile: str = "h200", steps: int = 4, call_ns: float = 100.0) -> dict:
    """Record each ``(case, cudagraph)`` of ``cases`` on the simulated device under ``HostCostClock``;
    returns ``{sim_case_name: (before trace, after trace)}``. ``steps`` profiled steps after 2
    waiting and 1 warm-up; graphs are captured before the first step."""

    prof = load_profile(profile)
    extra, slug = calibration_read_costs()
    warm_up()  # torch's first-use imports stay outside the clock (each call there is charged)
    out = {}
    paths: dict = {}
    for name, mode in cases:
        c = AB_CASES[name]
        for v in (c.before, c.after):
            if (v, mode) in paths:
                continue
            cfg = EngineConfig(model=model, workload="pr40143", num_requests=num_requests, placeholder=v[0],
                               scheduling=v[1], prefix_ranges=v[2], cudagraph=mode)
            meta = {"variant": cfg.variant_name(), "async_scheduling": True, "host_cost_calibration": slug,
                    "host_cost_model": f"HostCostClock(call_ns={call_ns:g}, placeholder reads from the {slug} "
                                       "calibration, each marked on the host timeline)"}
            dev = None

            def mark(fn: str, ns: float) -> None:
                end = dev.now_ns()
                dev.mark(fn, end - int(ns), end)

            clock = HostCostClock(call_ns, extra, mark=mark)
            with clock.active():
                dev = SimDevice(prof, clock=clock)
                eng = Engine(cfg, dev)
                if mode != "none":
                    eng.capture_graphs()
                run_dir = variant_dir(v) + ("" if mode == "none" else f"-{mode}")
                paths[(v, mode)] = trace_path(out_dir, run_dir)
                with device_capture(dev, paths[(v, mode)], metadata=meta, warmup=3, active=steps) as cap:
                    eng.run(3 + steps, capture=cap)
        out[sim_case_name(name, mode)] = (paths[(c.before, mode)], paths[(c.after, mode)])
    return out
