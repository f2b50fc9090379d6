"""Checking ``labkit whatif`` against measured A/B pairs of the lab's engine.

Each ``AB_CASES`` entry is a pair of engine variants that differ in one thing, and the what-if
that should turn the first run into the second, derived from the first run's trace and from
data that no second run gives (``derive_changes``):

* ``tensor->list`` (#40143): the placeholder reads get cheaper. The first trace shows how many
  reads each step makes inside ``schedule`` (``aten::item`` per tensor read in a torch.profiler
  trace; on the simulated device each read is marked, ``labkit.trace.whatif.sim_pairs``) and,
  in a profiled run, what one costs there (``traced_read_cost_ns``: the median time from one
  read to the next inside ``schedule``; a tensor read under torch.profiler records four aten
  ops, which an unprofiled calibration does not pay). The simulated host is charged the
  calibration's cost for each read and marks it, so there the calibration stands. A list read
  records nothing, so its calibrated cost (``labkit calibrate`` on the machine that recorded the
  trace) holds under the profiler too. ``^schedule$`` is scaled so its host work loses
  ``reads x (tensor read - list read)``;
* ``per_layer->per_step`` (#38794): the copies. The ledger (``labkit.attn.ledger``) says how many
  copies a step of the second variant makes inside the layers (none: its one copy a step is made
  before them), so ``--drop-copies`` removes all but that many of the pageable copies made inside
  the layers: their device ops, their waits and their share of the layers' host work as the first
  trace measures it (``labkit.trace.whatif.changes``). The second variant's one copy before the
  layers is not added (a what-if removes or shrinks work; it adds none).

``predict_pair(before, after, case)`` replays the first trace with the derived change and sets
the prediction (median step time and device idle fraction) beside the second trace as measured;
the second trace is read only for that comparison. ``lab_pairs(root)`` finds the recorded pairs
(``data/traces/<gpu>/<variant>/``); ``labkit.trace.whatif.sim_pairs`` records them on the
simulated device under a fixed host-cost model. ``bubble_model_rows`` puts #40143's published
figures next to the answer through the bubble model (``labkit.mm.overlap``).
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_left, bisect_right
from pathlib import Path

import numpy as np

from labkit.errors import UsageError
from labkit.trace.whatif.ab_cases import AB_CASES, ABCase, base_case, variant_dir

logger = logging.getLogger(__name__)

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


def reads_per_step(trace, within: str = SCHEDULE) -> list[int]:
    """Placeholder reads (``READ_SPANS``) inside the spans matching ``within``, per step of ``trace``."""
    from labkit.trace.read.load import as_trace
    from labkit.trace.whatif.dependency_graph import trace_records
    from labkit.trace.whatif.steps import find_step_spans

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
    from labkit.trace.read.load import as_trace
    from labkit.trace.whatif.dependency_graph import trace_records
    from labkit.trace.whatif.reads import read_cost_ns

    return read_cost_ns(trace_records(as_trace(trace)), within)


def ledger_layer_copies_per_step(strategy: str) -> int:
    """Host-to-device copies one step of prefix-range ``strategy`` makes inside the layers, as the
    ledger records them (copies with a layer index; two rows with images, one without, three
    layers: a per-step strategy's count does not depend on them)."""
    from labkit.attn.prefix_ranges import make_strategy

    s = make_strategy(strategy, "cpu")
    s.begin_step({0: [(2, 6), (9, 12)], 1: [(1, 3)], 2: []}, 3)
    for layer in range(3):
        s.tensor_for_layer(layer)
    s.end_step()
    return sum(1 for c in s.ledger.copy_rows() if c["layer"] is not None)


def derive_changes(case: str | ABCase, before) -> tuple[list, dict]:
    """The what-if of ``case`` derived from the first run's trace ``before`` (path or Trace) and
    calibration or ledger data, never from the second run: ``(changes, how)`` (see the module docstring)."""
    from labkit.trace.read.load import as_trace
    from labkit.trace.whatif.changes import Change
    from labkit.trace.whatif.sim_pairs import calibration_read_costs

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
    from labkit.trace.read.load import as_trace
    from labkit.trace.whatif.predict import predict

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
        from labkit.trace.whatif.sim_pairs import make_sim_pairs

        for case, (b, a) in make_sim_pairs(sim_dir).items():
            rows.append(predict_pair(b, a, case))
    cols = ["case", "source", "change", "before_step_ms", "predicted_after_step_ms", "measured_after_step_ms",
            "error", "predicted_after_idle_frac", "measured_after_idle_frac", "idle_error", "replay_check_before",
            "host_saving_ms"]
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
