"""Recorded engine runs: robust throughput for any result row, recorded traces, simulator vs GPU.

More: docs/reference.md, ``labkit.engine.recorded``.
"""

from __future__ import annotations

from pathlib import Path

from labkit.results import CALIBRATION, data_root, find_all

TRACE_SUFFIX = ".pt.trace.json.gz"


def traces_root() -> Path:
    """The folder holding recorded engine traces (``<data_root>/traces``, so ``LABKIT_DATA`` moves it)."""
    return data_root() / "traces"


def with_robust_metrics(rows: list[dict]) -> list[dict]:
    """Copies of engine ``rows`` that all carry ``tokens_per_s_median``/``_window`` and ``stall_ns``."""
    out = []
    for r in rows:
        r = dict(r)
        if r.get("tokens_per_s_median") is None:
            tps = float(r["batch_seqs"])
            r["tokens_per_step"] = tps
            r["tokens_per_s_median"] = tps / (float(r["median_ns"]) / 1e9)
            r["tokens_per_s_window"] = r.get("tokens_per_s")
            if r.get("window_ns") is not None and r.get("steps"):
                r["stall_ns"] = max(0.0, float(r["window_ns"]) - int(r["steps"]) * float(r["median_ns"]))
            r["metrics_derived"] = True
        out.append(r)
    return out


def variant_of_run(run: str) -> str:
    """``tensor-loop-none-async`` -> ``tensor/loop/none/async`` (run folders name variants)."""
    return run.replace("-", "/")


def engine_traces(machine: str = "h200", root: str | Path | None = None) -> dict[str, Path]:
    """Variant -> newest trace file under ``<root>/<machine>/<run>/`` (empty when none recorded)."""
    base = Path(root) if root is not None else traces_root()
    folder = base / machine
    out: dict[str, Path] = {}
    if not folder.is_dir():
        return out
    for run in sorted(p for p in folder.iterdir() if p.is_dir()):
        files = sorted(run.glob("*" + TRACE_SUFFIX))
        if files:
            out[variant_of_run(run.name)] = files[-1]
    return out


def _busy_per_step_us(trace) -> float | None:
    steps = trace.steps()
    return float(steps["device_busy_us"].median()) if len(steps) else None


def _idle_frac(trace) -> float | None:
    s = trace.summary()
    span = s["busy_us"] + s["idle_us"]
    return s["idle_us"] / span if span else None


def sim_vs_measured(sim_rows: list[dict], measured_rows: list[dict], analyses: dict | None = None):
    """A DataFrame of simulated against measured runs of the same variants (step, busy, idle, tok/s)."""
    import pandas as pd

    analyses = analyses or {}
    sim = {r["variant"]: r for r in with_robust_metrics(sim_rows)}
    out = []
    for m in with_robust_metrics(measured_rows):
        v = m["variant"]
        s = sim.get(v)
        if s is None:
            continue
        an = analyses.get(v)
        m_busy = _busy_per_step_us(an) if an is not None else None
        s_busy = (s["device_busy_ns"] / s["steps"] / 1e3) if s.get("device_busy_ns") is not None else None
        m_idle = _idle_frac(an) if an is not None else m.get("device_idle_frac")
        out.append({"variant": v, "measured_step_ms": m["median_ns"] / 1e6, "simulated_step_ms": s["median_ns"] / 1e6,
                    "step_ratio": s["median_ns"] / m["median_ns"],
                    "measured_busy_ms": None if m_busy is None else m_busy / 1e3,
                    "simulated_busy_ms": None if s_busy is None else s_busy / 1e3,
                    "busy_ratio": None if (m_busy is None or s_busy is None) else s_busy / m_busy,
                    "measured_idle_frac": m_idle, "simulated_idle_frac": s.get("device_idle_frac"),
                    "measured_tok_s": m["tokens_per_s_median"], "simulated_tok_s": s["tokens_per_s_median"]})
    return pd.DataFrame(out)


def analyze_recorded(machine: str = "h200", variants=None, root: str | Path | None = None) -> dict:
    """Variant -> ``labkit.trace.Trace`` of each recorded trace (``variants``: a subset)."""
    from labkit.trace import Trace

    traces = engine_traces(machine, root)
    wanted = traces if variants is None else {v: traces[v] for v in variants if v in traces}
    return {v: Trace(p) for v, p in wanted.items()}


def step_model_rows(rows: list[dict]) -> list[dict]:
    """Each simulated run beside the one step model (:mod:`labkit.step_model`): host, device and step per step."""
    from labkit.step_model import both_regimes

    out = []
    for r in with_robust_metrics(rows):
        if r.get("device_busy_per_step_ns") is None:
            continue
        host = sum(r[f"host_{p}_ns"] for p in ("schedule", "prepare", "forward", "sample"))
        model = both_regimes(r["device_busy_per_step_ns"], host)
        regime = "async" if r.get("async_scheduling", True) else "sync"
        out.append({"variant": r["variant"], "regime": regime, "device_ms": r["device_busy_per_step_ns"] / 1e6,
                    "host_ms": host / 1e6, "measured_step_ms": r["median_ns"] / 1e6,
                    "model_async_ms": model["async"].step_ns / 1e6, "model_sync_ms": model["sync"].step_ns / 1e6,
                    "bound": model[regime].bound,
                    "measured_over_model": r["median_ns"] / model[regime].step_ns - 1})
    return out


def _calibrated_ns(machine: str, variant: str, metric: str = "host_ns") -> float | None:
    """Median of a recorded calibration row of ``machine`` (None when it is not recorded)."""
    found = find_all(CALIBRATION, machine=machine)  # its quick run where no full one is recorded
    cal = found[0] if found else None
    vals = [r["median_ns"] for r in (cal.rows if cal else [])
            if r.get("variant") == variant and r.get("metric") == metric and r.get("median_ns") is not None]
    return float(vals[0]) if vals else None


def host_cost_figures(profile, gpu_rows: list[dict], analyses: dict | None = None, machine: str = "h200") -> dict:
    """The figures behind "what the profile's host cost per op is", read from the recorded files.

    ``profile``: the ``DeviceProfile`` the simulator uses; ``gpu_rows``: the measured engine rows;
    ``analyses``: variant -> analysis of the measured traces (``analyze_recorded``). Returns
    ``host_per_op_us`` (the profile's charge per engine op), ``ops_per_forward`` (engine ops of one
    forward of the profile's model), ``launch_add_us`` (a bare ``torch.add`` launch on that
    machine, from its ``calibration`` result), ``host_forward_ms`` (min, max of the measured
    eager rows' host forward per step, ``per_layer`` left out: its forward holds the copies) and
    ``busy_per_step_ms`` (median over the measured traces of the device busy time per step); a
    figure that is not recorded is None."""
    from labkit.engine.config import get_model_config
    from labkit.engine.model import HEAD_OPS, LAYER_OPS, TAIL_OPS
    from labkit.errors import UsageError

    try:
        n_ops = len(LAYER_OPS) * get_model_config(profile.model).num_layers + len(HEAD_OPS) + len(TAIL_OPS)
    except (UsageError, TypeError):
        n_ops = None
    fwd = [r["host_forward_ns"] / 1e6 for r in gpu_rows
           if r.get("host_forward_ns") is not None and "per_layer" not in r["variant"]
           and r.get("cudagraph", "none") == "none"]
    busy = [b for b in (_busy_per_step_us(a) for a in (analyses or {}).values()) if b is not None]
    add = _calibrated_ns(machine, "launch_torch_add1")
    return {
        "host_per_op_us": profile.launch_overhead_ns / 1e3,
        "ops_per_forward": n_ops,
        "launch_add_us": None if add is None else add / 1e3,
        "host_forward_ms": (min(fwd), max(fwd)) if fwd else None,
        "busy_per_step_ms": sorted(busy)[len(busy) // 2] / 1e3 if busy else None,
    }


def describe_host_cost(fig: dict) -> str:
    """``host_cost_figures`` as the lines notebook 02 prints (a figure not recorded says so)."""
    def val(v, fmt, unit):
        return "not recorded" if v is None else f"{v:{fmt}} {unit}"

    fwd = fig["host_forward_ms"]
    ops = fig["ops_per_forward"]
    return "\n".join([
        f"host cost per engine op in the profile: {val(fig['host_per_op_us'], '.1f', 'us')} "
        f"(host time of one forward / {'its op count, not recorded' if ops is None else f'its {ops:d} ops'})",
        f"bare torch.add launch on that machine (calibration): {val(fig['launch_add_us'], '.1f', 'us')}",
        "measured host forward per step (eager runs, per_layer aside): "
        + ("not recorded" if fwd is None else f"{fwd[0]:.1f}-{fwd[1]:.1f} ms"),
        f"measured device busy per step (median over the traces): {val(fig['busy_per_step_ms'], '.1f', 'ms')}",
    ])
