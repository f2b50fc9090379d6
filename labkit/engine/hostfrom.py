"""The simulated GPU fed with real vLLM's host: ``labkit bench engine --device sim --host-from vllm_step.json``.

The mini engine's host side is its own small scheduler and metadata code. A recorded census of
vLLM's whole engine step (``labkit bench vllm-step``, result ``vllm_step``: vLLM's CPU build,
host time per phase and A/B variant) says what a real vLLM step costs the host. Here each
phase's measured median, times a stated CPU-speed factor (``cpu_speed``: 1.0 = the census's CPU;
0.5 = a host twice as fast), becomes a fixed host cost (:class:`labkit.engine.device.hostcost.FixedHostCosts`)
of the mini engine on a frozen host clock, while the device keeps the recorded GPU profile
(``data/profiles/h200.json``), under no, piecewise or full CUDA graphs. Where each phase goes,
as in vLLM's GPU engine (``EngineCore.step`` / ``step_with_batch_queue``, one GPU, the
in-process ``UniProcExecutor``, the API server in a process of its own):

Which of the census's steps: ``forward="cpu"`` (``--host-forward cpu``, the default) takes the
steps as measured, where the CPU build's own forward runs between the host phases and, reading
the KV cache and the vocabulary's logits, evicts what they read next; ``off-host`` takes the steps
the census timed with the forward off the host (``off_host:`` rows,
:func:`labkit.vllm.census.step_census.forward_off_host`), the host phases as a GPU server's host pays them.

engine core, one thread, in this order: ``other`` (the core's glue), ``schedule``,
``prepare_inputs`` (the runner's input preparation; on the CPU build it includes the CPU
attention backend's metadata and the embedding gather, computed on the host: on a GPU the
backend differs and the gather is a kernel), the forward's launches (the profile's launch or
graph-replay cost, not the census's ``forward``, which is the CPU's own model), ``sample``
(the sampler's host side), then, once the step's tokens are on the host, ``update_from_output``.
With async scheduling (vLLM's default on a GPU since it became the default; the CPU build
turns it off) step n+1 is scheduled and launched before step n's tokens are waited for, so
this whole serial chain overlaps the device's step: a step takes about max(device, engine-core
host). Without it (sync) the chain and the device step add up, less the launches the device
overlaps.

frontend, another process: ``process_outputs`` (output processing and detokenization) takes
each step's outputs after the engine core emits them; it overlaps everything and sets the
pace only when it is the longer side.

Not in the census (the CPU build has none of it): the engine core's output serialization to
the frontend (msgpack, in an I/O thread of the core process, sharing its interpreter lock),
the GPU attention backend's metadata, and any device-to-host synchronization beyond the
sampled tokens.

:data:`VARIANT_ENGINE` maps each vLLM A/B variant to the mini engine's placeholder and
scheduling names (labels only here: with fixed host costs the mini scheduler's own Python time
does not count, and its decisions are identical across them). :func:`solve_published` finds
the device step and host speed that reproduce a published before/after result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.engine.device.hostcost import FixedHostCosts
from labkit.errors import UsageError

__all__ = ["VARIANT_ENGINE", "HOST_PHASES", "FORWARDS", "HostTable", "host_table_from_rows", "load_host_table",
           "run_host_from", "solve_published", "ratio_rows"]

#: vLLM A/B variant -> (placeholder, scheduling) of the mini engine: the pre-#40143 tensor reads and
#: #40143's list reads, both in vLLM 0.20's per-image loop; the list cumsum on the installed (windowed)
#: scheduler; the early return
VARIANT_ENGINE = {"baseline": ("tensor", "loop"), "pr40143": ("list", "loop"), "merged": ("list", "window"),
                  "early-return": ("list", "cursor")}
#: census phases the simulated host pays (``encoder`` is folded into ``other``: nothing in decode)
#: which of the census's steps a host table takes (:func:`host_table_from_rows`)
FORWARDS = ("cpu", "off-host")
HOST_PHASES = ("other", "schedule", "prepare_inputs", "sample", "update_from_output", "process_outputs")


@dataclass(frozen=True)
class HostTable:
    """Host ns per phase per vLLM variant at one census point, already scaled by ``cpu_speed``."""

    phases_ns: dict  #: variant -> {phase: ns}
    requests: int
    images: int
    cpu_speed: float = 1.0
    origin: str = "fixed table"
    forward: str = "cpu"  #: which of the census's steps (:data:`FORWARDS`)
    census_step_ns: dict = field(default_factory=dict)  #: variant -> the census's measured step (ns, unscaled)

    def costs(self, variant: str) -> FixedHostCosts:
        """The fixed host costs of ``variant``'s vLLM step."""
        p = self.phases_ns[variant]
        return FixedHostCosts(schedule_ns={"*": p["schedule"]}, prepare_ns=p["prepare_inputs"], other_ns=p["other"],
                              sample_ns=p["sample"], update_ns=p["update_from_output"], output_ns=p["process_outputs"])

    def core_ns(self, variant: str) -> float:
        """The engine core's serial host work per step (every phase but the frontend's)."""
        p = self.phases_ns[variant]
        return sum(p[k] for k in HOST_PHASES if k != "process_outputs")

    def frontend_ns(self, variant: str) -> float:
        return self.phases_ns[variant]["process_outputs"]


def host_table_from_rows(rows, *, requests: int = 128, images: int = 32, cpu_speed: float = 1.0,
                         origin: str = "rows", forward: str = "cpu") -> HostTable:
    """A :class:`HostTable` from ``vllm_step`` rows (``variant``, ``num_requests``, ``images``, ``phase``,
    ``median_us``) at one point; ``UsageError`` when the point or a phase is missing.

    ``forward``: ``cpu`` takes the census's steps as measured (the CPU's forward between the host
    phases); ``off-host`` the steps it timed with the forward off the host (``off_host:`` rows,
    :func:`labkit.vllm.census.step_census.forward_off_host`), the host phases as a GPU server pays them."""
    from labkit.vllm.census.step_rows import OFF_HOST

    if not cpu_speed > 0:
        raise UsageError(f"--cpu-speed must be > 0, got {cpu_speed}")
    if forward not in FORWARDS:
        raise UsageError(f"--host-forward must be one of {', '.join(FORWARDS)}, got {forward!r}")
    prefix = OFF_HOST if forward == "off-host" else ""
    at = [r for r in rows if r.get("num_requests") == requests and r.get("images") == images
          and r.get("variant") in VARIANT_ENGINE and r.get("median_us") is not None]
    if not at:
        points = sorted({(r.get("num_requests"), r.get("images")) for r in rows if r.get("phase") == "step"})
        raise UsageError(f"the census holds no {requests} x {images} point (it has "
                         f"{', '.join(f'{n}x{m}' for n, m in points) or 'none'})")
    # the measured steps' phases have no prefix; the steps with the forward off the host, OFF_HOST
    at = [r for r in at if str(r.get("phase", "")).startswith(prefix) and (prefix or ":" not in str(r["phase"]))]
    if not at:
        raise UsageError(f"the census at {requests} x {images} has no steps with the forward off the host "
                         "(recorded before they were added, or run with --no-off-host)")
    phases: dict = {}
    steps: dict = {}
    for r in at:
        phases.setdefault(r["variant"], {})[r["phase"][len(prefix):]] = float(r["median_us"]) * 1e3
    out = {}
    for v, p in phases.items():
        missing = [k for k in HOST_PHASES if k not in p]
        if missing:
            raise UsageError(f"the census's {v} row at {requests} x {images} lacks {', '.join(missing)}")
        out[v] = {k: p[k] * cpu_speed for k in HOST_PHASES}
        out[v]["other"] += p.get("encoder", 0.0) * cpu_speed
        steps[v] = p.get("step")
    return HostTable(out, requests, images, cpu_speed, origin, forward=forward, census_step_ns=steps)


def load_host_table(path, *, requests: int = 128, images: int = 32, cpu_speed: float = 1.0,
                    forward: str = "cpu") -> HostTable:
    """The host table of a recorded ``vllm_step`` result file (``--host-from``)."""
    import json
    from pathlib import Path

    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--host-from: cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or not str(doc.get("name", "")).startswith("vllm_step"):
        raise UsageError(f"--host-from: {path} is not a vllm_step result (labkit bench vllm-step)")
    machine = (doc.get("machine") or {}).get("slug", "?")
    return host_table_from_rows(doc.get("rows") or [], requests=requests, images=images, cpu_speed=cpu_speed,
                                origin=f"{machine}/{p.name} ({doc.get('source')}, {doc.get('size')}"
                                       f"{', forward off the host' if forward == 'off-host' else ''})",
                                forward=forward)


def run_host_from(table: HostTable, *, profile=None, cudagraph=("none", "piecewise", "full"),
                  async_modes=(True, False), model: str = "gemma4-e4b-like", workload: str = "pr40143",
                  steps: int = 12, warmup: int = 3, variants=None) -> list[dict]:
    """Every variant of ``table`` under each CUDA-graph mode and scheduling mode: one row each
    (``labkit.engine.loop.summarize_run`` plus ``vllm_variant``, ``cpu_speed_factor``, ``host_from``,
    the phases' host ms and the engine core's serial host per step)."""
    from labkit.engine.config import EngineConfig
    from labkit.engine.device.hostcost import make_fixed_cost_device
    from labkit.engine.loop import Engine, summarize_run

    rows = []
    for graph in cudagraph:
        for is_async in async_modes:
            for v in (variants or [v for v in VARIANT_ENGINE if v in table.phases_ns]):
                ph, sc = VARIANT_ENGINE[v]
                cfg = EngineConfig(model=model, workload=workload, num_requests=table.requests, placeholder=ph,
                                   scheduling=sc, prefix_ranges="none", async_scheduling=is_async, cudagraph=graph)
                engine = Engine(cfg, make_fixed_cost_device(profile), host_costs=table.costs(v))
                engine.run(warmup + steps + 1)
                row = summarize_run(engine, warmup_steps=warmup, measured_steps=steps)
                row.update({"vllm_variant": v, "cpu_speed_factor": table.cpu_speed, "host_from": table.origin,
                            "host_point": f"{table.requests}x{table.images}",
                            "engine_core_host_ms": table.core_ns(v) / 1e6, "frontend_host_ms": table.frontend_ns(v) / 1e6,
                            **{f"host_{k}_ms": table.phases_ns[v][k] / 1e6 for k in HOST_PHASES}})
                if profile is not None:
                    row.update(profile.describe())
                rows.append(row)
    return rows


def ratio_rows(rows, published, *, before: str = "baseline", after=("pr40143", "merged")) -> list[dict]:
    """Per CUDA-graph mode and scheduling mode, the predicted before/after ratios beside ``published``'s:
    ``tok_s_ratio`` (after / before output tokens/s) and TPOT before -> after (ms)."""
    out = []
    keys = sorted({(r["cudagraph"], r["async_scheduling"]) for r in rows}, key=lambda k: (k[0], not k[1]))
    for graph, is_async in keys:
        mine = {r["vllm_variant"]: r for r in rows if r["cudagraph"] == graph and r["async_scheduling"] == is_async}
        b = mine.get(before)
        for a in after:
            if b is None or a not in mine:
                continue
            ra = mine[a]
            out.append({"cudagraph": graph, "async_scheduling": is_async, "before": before, "after": a,
                        "cpu_speed_factor": b["cpu_speed_factor"],
                        "tok_s_ratio": ra["tokens_per_s_median"] / b["tokens_per_s_median"],
                        "tpot_before_ms": b["tpot_mean_ms"], "tpot_after_ms": ra["tpot_mean_ms"],
                        "device_idle_before": b["device_idle_frac"], "device_idle_after": ra["device_idle_frac"],
                        "published_tok_s_ratio": published.throughput_gain,
                        "published_tpot_before_ms": published.mean_tpot_ms_before,
                        "published_tpot_after_ms": published.mean_tpot_ms_after})
    return out


def solve_published(table: HostTable, published, *, before: str = "baseline", after: str = "pr40143") -> list[dict]:
    """What device step (ms) and host speed factor reproduce ``published``'s TPOT before and after.

    Per scheduling mode, from the table's host per step (engine core ``H``, frontend ``F``, at
    ``cpu_speed`` 1: the factors below multiply the census's host) and the published TPOTs
    ``Tb`` -> ``Ta``:

    - async, step = max(D, s * H, s * F): before host-bound, ``s = Tb / max(Hb, Fb)``; after at
      ``Ta``: device-bound with ``D = Ta`` if ``s * max(Ha, Fa) <= Ta``, else host-bound too
      (then ``D`` <= ``Ta`` is free and the ratio is fixed by the host alone: the solve says so);
    - sync, step = s * H + D (the frontend overlapping): ``s = (Tb - Ta) / (Hb - Ha)``,
      ``D = Ta - s * Ha``; no solution when ``D`` would be negative or the host saves nothing.
    """
    unscale = 1.0 / table.cpu_speed
    hb, ha = table.core_ns(before) * unscale / 1e6, table.core_ns(after) * unscale / 1e6
    fb, fa = table.frontend_ns(before) * unscale / 1e6, table.frontend_ns(after) * unscale / 1e6
    tb, ta = published.mean_tpot_ms_before, published.mean_tpot_ms_after
    out = []
    s = tb / max(hb, fb)
    after_host = s * max(ha, fa)
    if after_host <= ta:
        out.append({"scheduling": "async", "cpu_speed_factor": s, "device_step_ms": ta, "host_before_ms": s * hb,
                    "host_after_ms": s * ha, "solved": True,
                    "how": f"before host-bound: s = {tb:.2f} / {max(hb, fb):.2f} ms; after device-bound: D = {ta:.2f} ms "
                           f"(host after {after_host:.2f} ms <= D)"})
    else:
        out.append({"scheduling": "async", "cpu_speed_factor": s, "device_step_ms": None, "host_before_ms": s * hb,
                    "host_after_ms": s * ha, "solved": False,
                    "how": f"at s = {s:.3f} the host after the fix ({after_host:.2f} ms) still exceeds {ta:.2f} ms: "
                           f"both host-bound, ratio {max(hb, fb) / max(ha, fa):.3f} whatever the device"})
    if hb > ha:
        s2 = (tb - ta) / (hb - ha)
        d2 = ta - s2 * ha
        ok = d2 >= 0
        out.append({"scheduling": "sync", "cpu_speed_factor": s2, "device_step_ms": d2 if ok else None,
                    "host_before_ms": s2 * hb, "host_after_ms": s2 * ha, "solved": ok,
                    "how": f"s = ({tb:.2f} - {ta:.2f}) / ({hb:.2f} - {ha:.2f}) ms; D = {ta:.2f} - s x {ha:.2f} ms"
                           + ("" if ok else " < 0: no device step fits")})
    else:
        out.append({"scheduling": "sync", "cpu_speed_factor": None, "device_step_ms": None, "host_before_ms": hb,
                    "host_after_ms": ha, "solved": False, "how": "the host saves nothing between the two variants"})
    return out
