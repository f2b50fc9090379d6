"""``labkit bench serve-sim``: #40143's published table predicted by the one step model (result ``pr_table``).

More: docs/reference.md, ``labkit.serve.bench``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path

from labkit.errors import UsageError
from labkit.results import PR_TABLE, make_result, results_root, sized_name
from labkit.serve.api_server import Intake
from labkit.serve.clock import StepShape, simulate
from labkit.serve.gpu.device_model import GPUS, describe_device, step_device_fn
from labkit.serve.host import UnitCosts, chains_from_census, infer_read_ns, measured_units
from labkit.serve.metrics import compute_metrics
from labkit.serve.published import ARMS as PUBLISHED_ARMS
from labkit.serve.published import METRICS, PR40143, two_phases
from labkit.serve.workload import get_workload, prompt_layout
from labkit.step_model import REGIMES, both_regimes, peak_tokens_per_s
from labkit.timing import stopwatch

__all__ = ["ARMS", "CENSUS_MACHINE", "GPU_NODE", "INTAKE_STAGES", "ServeHost", "intake_ns",
           "predicted_metrics", "full_batch_device_ns", "peak_rows", "infer_intake", "predict", "add_cli_args", "main"]

logger = logging.getLogger(__name__)

ARMS = ("baseline", "pr40143", "merged", "early-return")
#: the machine whose census and input processing are read by default
CENSUS_MACHINE = "cpu-epyc-2c"
#: the lab's GPU node, whose calibration prices the Python-loop units on the PR's machine
GPU_NODE = "h200"
#: the intake stages per image: JPEG decode, then the whole add_request (HF processor, hashing, cache)
INTAKE_STAGES = ("media_decode", "add_request")
#: the published figure each inferred quantity comes from, and its tolerance (intake: a secant on the runs)
TTFT_TOLERANCE, TTFT_MAX_RUNS = 0.005, 6


class ServeHost:
    """The clock's host model of one arm: the census's chain at the step's requests, priced at ``units``."""

    def __init__(self, chains, arm: str, units: UnitCosts) -> None:
        self.chains, self.arm, self.units = chains, arm, units

    def core_ns(self, shape) -> float:
        return self.chains.core_ns(self.arm, max(1, shape.num_requests), self.units)

    def frontend_ns(self, outputs: int) -> float:
        return self.chains.api_ns(self.arm, max(1, outputs), self.units)


def _read(path: Path, role: str) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"serve-sim needs {path} ({role}): {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise UsageError(f"{path} ({role}) is not a labkit result")
    return doc


def _inputs(root: Path, census_machine: str) -> dict:
    node = root / GPU_NODE / "calibration.json"
    node = node if node.exists() else root / GPU_NODE / "calibration_quick.json"
    return {"census": _read(root / census_machine / "vllm_step.json", "the census of vLLM's step"),
            "input": _read(root / census_machine / "vllm_input.json", "vLLM's input processing"),
            "node": _read(node, "the GPU node's calibration")}


def intake_ns(doc: dict) -> dict:
    """Per image, ns of each of :data:`INTAKE_STAGES` on the machine that recorded ``doc`` (``vllm_input``)."""
    by = {r.get("stage"): r.get("per_image_median_us") for r in doc.get("rows", [])}
    missing = [s for s in INTAKE_STAGES if not isinstance(by.get(s), (int, float))]
    if missing:
        raise UsageError(f"the input-processing result lacks the stages {', '.join(missing)}")
    return {s: float(by[s]) * 1e3 for s in INTAKE_STAGES}


def predicted_metrics(token_ns: list, prompt_len: int) -> dict:
    """The table's metrics of a simulated run, as ``vllm bench serve`` computes them."""
    m = compute_metrics([[t / 1e9 for t in ts] for ts in token_ns], [prompt_len] * len(token_ns))
    return {"output_tok_s": m.output_throughput, "mean_tpot_ms": m.mean_tpot_ms, "mean_ttft_s": m.mean_ttft_ms / 1e3,
            "duration_s": m.duration_s, "whole_run_peak_tok_s": m.max_output_tokens_per_s}


def _phases(tl) -> dict:
    """The run cut where the last request was handed over: arrival (steps before), decode (after)."""
    cut = max(tl.handover_ns)
    out = {}
    for name, steps in (("arrival", [s for s in tl.steps if s.start_ns < cut]),
                        ("decode", [s for s in tl.steps if s.start_ns >= cut])):
        if steps:
            out[name] = {"steps": len(steps), "seconds": sum(s.end_ns - s.start_ns for s in steps) / 1e9,
                         "mean_step_ms": statistics.fmean(s.end_ns - s.start_ns for s in steps) / 1e6,
                         "mean_device_ms": statistics.fmean(s.device_ns for s in steps) / 1e6,
                         "mean_host_ms": statistics.fmean(s.core_host_ns for s in steps) / 1e6,
                         "host_bound_share": sum(s.host_bound for s in steps) / len(steps)}
    return out


def _run(arm: str, gpu: str, *, workload, model_dir, chains, units: UnitCosts, intake: dict, scale: float,
         regime: str) -> dict:
    """One arm's whole run on the simulated clock (needs vLLM): metrics and phases."""
    from labkit.serve.vllm_driver import ServeConfig, VllmDriver, kv_blocks_for, make_serving_scheduler
    from labkit.serve.workload import make_vllm_requests
    from labkit.vllm.ab import patched_vllm

    prompt_len, spans = prompt_layout(workload)
    config = ServeConfig(num_blocks=kv_blocks_for(workload.requests, prompt_len, workload.output_tokens),
                         max_item_tokens=spans[0].length if spans else 1, async_scheduling=regime == "async")
    frontend = Intake(0.0, intake["media_decode"], intake["add_request"] * workload.images,
                      workload.images).scaled(scale)
    with stopwatch() as wall, patched_vllm(arm):
        driver = VllmDriver(make_serving_scheduler(model_dir, config), make_vllm_requests(workload, prefix=f"{arm}-"),
                            async_scheduling=config.async_scheduling)
        tl = simulate(driver, requests=workload.requests, intake=frontend, host=ServeHost(chains, arm, units),
                      device=step_device_fn(gpu), regime=regime)
    logger.info("serve-sim %s on %s: %d steps in %.0f s of wall time", arm, gpu, len(tl.steps), wall.s)
    return {"metrics": predicted_metrics(tl.token_ns, prompt_len), "phases": _phases(tl),
            "scheduler": config.describe()}


def full_batch_device_ns(gpu: str, requests: int, prompt_len: int) -> float:
    """The device step of ``requests`` decoding their first token after a ``prompt_len`` prompt: the
    earliest full-batch step, the shortest context, the fastest step."""
    return step_device_fn(gpu)(StepShape(decode_context_lens=(prompt_len,) * requests))


def peak_rows(chains, units: UnitCosts, gpus, arms, *, requests: int, prompt_len: int) -> list[dict]:
    """The steady full-batch step per GPU x arm x regime (:func:`full_batch_device_ns`), its device
    and host, which sets it, and the peak output tok/s ``vllm bench serve`` reports for it."""
    rows = []
    for gpu in gpus:
        device_ns = full_batch_device_ns(gpu, requests, prompt_len)
        for arm in arms:
            host_ns = chains.core_ns(arm, requests, units)
            for regime, step in both_regimes(device_ns, host_ns).items():
                rows.append({"gpu": gpu, "arm": arm, "regime": regime, "device_ms": device_ns / 1e6,
                             "host_ms": host_ns / 1e6, "step_ms": step.step_ns / 1e6, "bound": step.bound,
                             "peak_output_tok_s": peak_tokens_per_s(step.step_ns, requests)})
    return rows


def infer_intake(run_baseline, published_ttft_s: float) -> tuple[float, list]:
    """The intake scale (the PR machine's intake per image over the recorded one) at which the
    baseline's simulated mean TTFT is the published one: a secant from 1, until within
    :data:`TTFT_TOLERANCE` (``UsageError`` after :data:`TTFT_MAX_RUNS` runs). ``run_baseline(scale)``
    returns the run's mean TTFT (s)."""
    tried = []
    a, fa = 1.0, run_baseline(1.0) - published_ttft_s
    tried.append((a, fa + published_ttft_s))
    b = a * published_ttft_s / (fa + published_ttft_s)  # TTFT is near proportional to the intake
    for _ in range(TTFT_MAX_RUNS - 1):
        fb = run_baseline(b) - published_ttft_s
        tried.append((b, fb + published_ttft_s))
        if abs(fb) <= TTFT_TOLERANCE * published_ttft_s:
            return b, tried
        if fb == fa:
            break
        a, fa, b = b, fb, b - fb * (b - a) / (fb - fa)
    raise UsageError(f"the intake inference did not reach the published mean TTFT within {TTFT_TOLERANCE:.1%} "
                     f"in {len(tried)} runs: {tried}")


def _range(entries: list, key: str) -> dict:
    by: dict = {}
    for e in entries:
        by.setdefault(e["machine"], []).append(e[key])
    return {m: {"min": min(v), "max": max(v), "measurements": len(v)} for m, v in sorted(by.items())}


def predict(size: str = "quick", gpus=("h200", "h100"), arms=("baseline", "pr40143"), *, regime: str = "async",
            census_machine: str = CENSUS_MACHINE, root=None):
    """The whole comparison (needs vLLM): the result ``pr_table`` (``pr_table_quick`` at quick size,
    which compares nothing and infers nothing: the GPU node's measured unit costs, the recorded intake)."""
    from labkit.device import describe_machine
    from labkit.machine_load import machine_load
    from labkit.vllm.census.sched_census import write_model_config
    from labkit.vllm.census.step_bench import require_vllm

    if regime not in REGIMES:
        raise UsageError(f"--regime must be one of {', '.join(REGIMES)}")
    bad = [g for g in gpus if g not in GPUS] + [a for a in arms if a not in ARMS]
    if bad or not gpus or not arms:
        raise UsageError(f"choose GPUs from {', '.join(GPUS)} and arms from {', '.join(ARMS)} (got {', '.join(bad)})")
    version = require_vllm()
    root = Path(root) if root is not None else results_root()
    docs = _inputs(root, census_machine)
    chains = chains_from_census(docs["census"], arms)
    node = UnitCosts.from_rows(docs["node"]["rows"], f"{GPU_NODE}/{docs['node'].get('name', 'calibration')}")
    intake = intake_ns(docs["input"])
    workload = get_workload(size)
    prompt_len, _ = prompt_layout(workload)
    compare = size == "full"
    named = gpus[0]
    inferred: dict = {}
    units = node
    if compare:
        if "baseline" not in arms:
            raise UsageError("a full run infers the PR host from the baseline arm: include it in --arms")
        devices = {g: full_batch_device_ns(g, workload.requests, prompt_len) for g in gpus}
        peak = PR40143.before.peak_output_tok_s
        step = workload.requests / peak * 1e9
        if regime == "async" and any(d >= step for d in devices.values()):
            raise UsageError(f"the baseline's peak step ({step / 1e6:.2f} ms) is device-bound on "
                             f"{', '.join(g for g, d in devices.items() if d >= step)}: it says nothing of the host")
        host = step if regime == "async" else step - devices[named]  # step_time solved for the host
        got = infer_read_ns(chains, host_ns=host, requests=workload.requests, loop_ns=node.loop_ns)
        units = UnitCosts(got["read_ns"], node.loop_ns, "read: inferred from the baseline's published peak; "
                                                        f"loop: {node.where} (measured there)")
        lab = measured_units(root)
        inferred["read_ns"] = {**got, "value": got["read_ns"], "step_ns": step,
                               "from": f"baseline peak_output_tok_s (published {peak:g}): the full-batch step is "
                                       f"requests / peak, host-bound; its host side solved from the step model ({regime})",
                               "lab_measured_ns": _range(lab, "read_ns")}
    runs: dict = {}
    with tempfile.TemporaryDirectory(prefix="labkit-serve-sim-") as tmp, machine_load() as load:
        model_dir = write_model_config(tmp)

        def run(arm, gpu, scale):
            return _run(arm, gpu, workload=workload, model_dir=model_dir, chains=chains, units=units,
                        intake=intake, scale=scale, regime=regime)

        scale = 1.0
        if compare:
            first: dict = {}

            def baseline_ttft(s):
                first[s] = run("baseline", named, s)
                return first[s]["metrics"]["mean_ttft_s"]

            scale, tried = infer_intake(baseline_ttft, PR40143.before.mean_ttft_s)
            runs[("baseline", named)] = first[scale]
            here = sum(intake.values())
            inferred["intake_per_image_ms"] = {
                "value": here * scale / 1e6, "scale": scale, "runs": [{"scale": s, "mean_ttft_s": t} for s, t in tried],
                "from": f"baseline mean_ttft_s (published {PR40143.before.mean_ttft_s:g}) on {named}",
                "lab_measured_ms": {census_machine: here / 1e6}, "stages_measured_ms": {s: v / 1e6 for s, v in intake.items()}}
        for gpu in gpus:
            for arm in arms:
                if (arm, gpu) not in runs:
                    runs[(arm, gpu)] = run(arm, gpu, scale)
    peaks = peak_rows(chains, units, gpus, arms, requests=workload.requests, prompt_len=prompt_len)
    rows = []
    for gpu in gpus:
        for arm in arms:
            got = dict(runs[(arm, gpu)]["metrics"])
            got["peak_output_tok_s"] = next(p["peak_output_tok_s"] for p in peaks
                                            if (p["gpu"], p["arm"], p["regime"]) == (gpu, arm, regime))
            side = PR40143.side(arm) if compare and arm in PUBLISHED_ARMS else None
            for metric, unit in METRICS.items():
                pub = side.get(metric) if side else None
                rows.append({"arm": arm, "gpu": gpu, "metric": metric, "unit": unit, "predicted": got[metric],
                             "published": pub, "error": None if pub is None else (got[metric] - pub) / pub,
                             "inferred": _inferred_from(arm, metric) if compare else None})
    phases = {f"{arm}/{gpu}": {"run": runs[(arm, gpu)]["phases"],
                               "arithmetic": two_phases(_as_side(runs[(arm, gpu)]["metrics"], rows, arm, gpu),
                                                        workload.requests, workload.output_tokens)}
              for gpu in gpus for arm in arms}
    params = {
        "size": size, "gpu": named, "gpus": list(gpus), "arms": list(arms), "regime": regime,
        "workload": workload.describe(), "prompt_tokens": prompt_len, "published": PR40143.name if compare else None,
        "published_phases": {a: two_phases(PR40143.side(a)) for a in PUBLISHED_ARMS} if compare else None,
        "fitted": {}, "inferred": inferred, "units": units.as_dict(), "gpu_node_units": node.as_dict(),
        "census": _prov(docs["census"]), "input_processing": _prov(docs["input"]), "gpu_node": _prov(docs["node"]),
        "census_machine": census_machine, "chains": {a: [(n, asdict(c)) for n, c in pts] for a, pts in chains.points.items()},
        "device": {g: describe_device(g) for g in gpus}, "peaks": peaks, "phases": phases,
        "step_model": "async: max(device, engine-core host) + 0 (no non-overlapping part measured); sync: device + host",
        "scheduler": f"vLLM {version} {'AsyncScheduler' if regime == 'async' else 'Scheduler'} on "
                     f"{describe_machine().get('cpu_model')}", "scheduler_config": runs[(arms[0], named)]["scheduler"],
        "intake": "the API server's one thread: every request's image decode, then each request's add_request, "
                  "request by request; each stage per image as recorded x the intake scale",
        "machine_load": load,
        "note": "simulated: vLLM's scheduler runs for real, the clock (host from recorded CPU results, device "
                "from the roofline) is simulated; not a GPU measurement",
    }
    return make_result(sized_name(PR_TABLE, size), rows, params=params, source="simulated", size=size)


def _inferred_from(arm: str, metric: str) -> str | None:
    """Which published figure a row was inferred from (its error is then zero by construction, up to
    the peak's one-second buckets and the secant's tolerance)."""
    if arm == "baseline" and metric == "peak_output_tok_s":
        return "the PR host's cost per tensor read"
    if arm == "baseline" and metric == "mean_ttft_s":
        return "the PR machine's intake per image"
    return None


def _as_side(metrics: dict, rows: list, arm: str, gpu: str):
    from labkit.serve.published import Published

    peak = next(r["predicted"] for r in rows if (r["arm"], r["gpu"], r["metric"]) == (arm, gpu, "peak_output_tok_s"))
    return Published(metrics["output_tok_s"], peak, metrics["mean_tpot_ms"], metrics["mean_ttft_s"], metrics["duration_s"])


def _prov(doc: dict) -> dict:
    return {k: doc.get(k) for k in ("name", "labkit_commit", "size", "source", "created")} | {
        "machine": (doc.get("machine") or {}).get("slug")}


def print_table(result) -> None:
    print(f"{'gpu':<5} {'arm':<10} {'metric':<20} {'predicted':>11} {'published':>11} {'error':>8}")
    for r in result.rows:
        pub = "-" if r["published"] is None else f"{r['published']:.4g}"
        err = "-" if r["error"] is None else f"{r['error']:+.1%}"
        note = f"  (inferred: {r['inferred']})" if r.get("inferred") else ""
        print(f"{r['gpu']:<5} {r['arm']:<10} {r['metric']:<20} {r['predicted']:>11.4g} {pub:>11} {err:>8}{note}")
    for name, q in result.params["inferred"].items():
        print(f"inferred {name}: {q['value']:.4g} from {q['from']}")
    print("source: simulated (vLLM's real scheduler on this CPU; simulated clock and device)")


def add_cli_args(p: argparse.ArgumentParser) -> None:
    from labkit.cli import add_run_options

    add_run_options(p, json_help="also write the result JSON to OUT",
                    size_help="quick (default: 4 requests x 2 images x 16 tokens, nothing compared) or full "
                              "(#40143's run: 128 x 32 images x 8,000 tokens, the published table)")
    p.add_argument("--gpu", default="h200,h100", help=f"comma list from {', '.join(GPUS)}; the first is the one "
                                                      "the inference runs on (default h200,h100)")
    p.add_argument("--arms", default="baseline,pr40143", help=f"comma list from {', '.join(ARMS)} (default baseline,pr40143)")
    p.add_argument("--regime", choices=REGIMES, default="async", help="async (vLLM's default) or sync scheduling")
    p.add_argument("--census-machine", default=CENSUS_MACHINE,
                   help=f"the machine whose recorded census and input processing are read (default {CENSUS_MACHINE})")


def main(args: argparse.Namespace) -> int:
    from labkit.cli import emit_result, resolve_run_options
    from labkit.machine_load import describe_load

    size = resolve_run_options(args)
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    result = predict(size, tuple(split(args.gpu)), tuple(split(args.arms)), regime=args.regime,
                     census_machine=args.census_machine)
    print_table(result)
    print(describe_load(result.params.get("machine_load")))
    emit_result(result, args)
    return 0
