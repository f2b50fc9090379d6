"""The engine's A/B pairs recorded on the simulated device under a fixed host-cost model.

``HostCostClock`` is a clock for ``SimDevice(clock=...)`` whose host time advances only by counted
work: every Python call costs ``call_ns``, and the calls named in ``extra_ns`` cost that much more
(the placeholder reads at the unit costs ``labkit calibrate`` measured: ``calibration_read_costs``).
The simulated host time then follows the work done, not how fast or how loaded the machine is.
Each call charged extra is also marked on the simulated host timeline (a span named after the
function), as a profiler that records Python frames would show it: the trace itself says how
many placeholder reads each step made.

``make_sim_pairs(dir)`` records each case of ``SIM_CASES`` (an ``AB_CASES`` pair in a CUDA-graph
mode: eager runs are host-bound; under graphs the host's launch work shrinks so host and device
overlap and the answer is not simply the host time).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.whatif.ab_cases import AB_CASES, variant_dir

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
    from labkit.results import load_results

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
    from labkit.attn.prefix_ranges import warm_up
    from labkit.engine.config import EngineConfig
    from labkit.engine.device.devices import SimDevice
    from labkit.engine.loop import Engine
    from labkit.engine.device.profiles import load_profile
    from labkit.trace.capture import make_capture

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
                cap = make_capture(dev, out_dir, run_dir, metadata=meta, wait=2, warmup=1, active=steps)
                with cap:
                    eng.run(3 + steps, capture=cap)
            paths[(v, mode)] = Path(cap.paths[0])
        out[sim_case_name(name, mode)] = (paths[(c.before, mode)], paths[(c.after, mode)])
    return out
