"""``labkit bench serve-sim``: #40143's published table predicted by the one step model (result ``pr_table``).

More: docs/reference.md, ``labkit.serve.bench_serve_sim``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from labkit.bench import add_run_options, report, resolve_run_options
from labkit.errors import UsageError
from labkit.results import (CALIBRATION, PR_TABLE, SERVE_SIM_CHECK, VLLM_INPUT, VLLM_OVERLAP, VLLM_SERVE_TIMELINE,
                            VLLM_STEP, find, make_result, results_root, sized_name)
from labkit.serve.api_server import Intake
from labkit.serve.clock import simulate
from labkit.gpu.device_model import GPUS, describe_device, full_batch_device_ns, step_device_fn
from labkit.serve.host import UnitCosts, chains_from_census, infer_read_ns, measured_units
from labkit.serve.metrics import compute_metrics
from labkit.facts import ARMS as PUBLISHED_ARMS
from labkit.facts import METRICS, PR40143, two_phases
from labkit.vllm.serving import WORKLOADS, ServeWorkload, prompt_layout
from labkit.step_model import REGIMES, both_regimes, peak_tokens_per_s
from labkit.timing import stopwatch

__all__ = ["ARMS", "CENSUS_MACHINE", "GPU_NODE", "ServeHost", "isolated_intake", "predicted_metrics",
           "peak_rows", "infer_intake", "gain_rows", "predict", "add_cli_args", "main"]

logger = logging.getLogger(__name__)

ARMS = ("baseline", "pr40143", "merged", "early-return")
#: the machine whose census and input processing are read by default
CENSUS_MACHINE = "cpu-epyc-2c"
#: the lab's GPU node, whose calibration prices the Python-loop units on the PR's machine
GPU_NODE = "h200"
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


#: what serve-sim reads, each through the results store: key -> (result name, role)
INPUTS = {"census": (VLLM_STEP, "the census of vLLM's step (labkit bench vllm-step)"),
          "input": (VLLM_INPUT, "vLLM's input processing (labkit bench vllm-input)"),
          "timeline": (VLLM_SERVE_TIMELINE, "vLLM's own server, timed (scripts/vllm_ab.sh --timeline)"),
          "overlap": (VLLM_OVERLAP, "vLLM's engine core against a set forward (labkit bench vllm-overlap)")}


def _inputs(root: Path, census_machine: str) -> dict:
    """The recorded results serve-sim reads (each machine's full run over its quick one), as JSON objects:
    ``census_machine``'s and the GPU node's calibration; ``UsageError`` naming the one missing."""
    wanted = {k: (name, census_machine, role) for k, (name, role) in INPUTS.items()}
    wanted["node"] = (CALIBRATION, GPU_NODE, "the GPU node's calibration")
    docs = {}
    for key, (name, machine, role) in wanted.items():
        res = find(name, machine=machine, root=root)
        if res is None:
            raise UsageError(f"serve-sim needs {name} of {machine} under {root} ({role})")
        docs[key] = res.to_json()
    return docs


#: the intake stages vllm_input times alone, per image: (Intake field, stages summed into it)
INTAKE_STAGES = {"parse_ns": ("client_serialize", "request_parse"), "image_ns": ("media_decode",),
                 "process_ns": ("add_request",)}


def isolated_intake(input_doc: dict, images: int) -> tuple[Intake, dict]:
    """A request of ``images`` images through vLLM's intake on a host with cores to spare: each stage
    as ``vllm_input`` timed it alone on this machine (the body serialized by the client and parsed by
    the server, one after another; each image decoded on one of the pool's eight workers; the
    processor's whole ``add_request`` on its single worker). The server runs on this 2-core machine
    (``vllm_serve_timeline``) share two cores among the pool, the processor and the engine, which a
    GPU server's host does not."""
    by = {r.get("stage"): r.get("per_image_median_us") for r in input_doc.get("rows", [])}
    missing = [st for sts in INTAKE_STAGES.values() for st in sts if not isinstance(by.get(st), (int, float))]
    if missing:
        raise UsageError(f"the input-processing result lacks the stages {', '.join(missing)}")
    per_image = {f: sum(by[st] for st in sts) * 1e3 for f, sts in INTAKE_STAGES.items()}
    intake = Intake(per_image["parse_ns"] * images, per_image["image_ns"], per_image["process_ns"] * images, images)
    return intake, {"per_image_ms": {f: v / 1e6 for f, v in per_image.items()},
                    "from": "vllm_input, each stage timed alone: " + "; ".join(f"{f}: {' + '.join(sts)}"
                                                                           for f, sts in INTAKE_STAGES.items())}


def non_overlap_ns(overlap: dict, regime: str) -> float:
    """The step model's non-overlapping term under ``regime``, as ``vllm_overlap`` measured it: the
    median, over its forward times > 0 and arms, of step - max(forward, host) (async) or step -
    (forward + host) (sync)."""
    key = "non_overlap_ms" if regime == "async" else "serial_excess_ms"
    got = [r[key] for r in overlap.get("rows", []) if r.get("regime") == regime and (r.get("forward_ms") or 0) > 0
           and isinstance(r.get(key), (int, float))]
    if not got:
        raise UsageError(f"vllm_overlap holds no {regime} point with a forward")
    return max(0.0, statistics.median(got)) * 1e6


def predicted_metrics(token_ns: list, prompt_len: int) -> dict:
    """The table's metrics of a simulated run, as ``vllm bench serve`` computes them."""
    m = compute_metrics([[t / 1e9 for t in ts] for ts in token_ns], [prompt_len] * len(token_ns))
    return {"output_tok_s": m.output_throughput, "mean_tpot_ms": m.mean_tpot_ms, "mean_ttft_s": m.mean_ttft_ms / 1e3,
            "duration_s": m.duration_s}


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


def _run(arm: str, gpu: str, *, workload, model_dir, chains, units: UnitCosts, intake: Intake, scale: float,
         regime: str, non_overlap: float) -> dict:
    """One arm's whole run on the simulated clock (needs vLLM): metrics and phases."""
    from labkit.vllm.serving import ServeConfig, VllmDriver, kv_blocks_for, make_serving_scheduler, make_vllm_requests
    from labkit.vllm.ab import patched_vllm

    prompt_len, spans = prompt_layout(workload)
    config = ServeConfig(num_blocks=kv_blocks_for(workload.requests, prompt_len, workload.output_tokens),
                         max_item_tokens=spans[0].length if spans else 1, async_scheduling=regime == "async")
    frontend = intake.scaled(scale)
    with stopwatch() as wall, patched_vllm(arm):
        driver = VllmDriver(make_serving_scheduler(model_dir, config), make_vllm_requests(workload, prefix=f"{arm}-"),
                            async_scheduling=config.async_scheduling)
        tl = simulate(driver, requests=workload.requests, intake=frontend, host=ServeHost(chains, arm, units),
                      device=step_device_fn(gpu), regime=regime, non_overlap_ns=non_overlap)
    logger.info("serve-sim %s on %s: %d steps in %.0f s of wall time", arm, gpu, len(tl.steps), wall.s)
    return {"metrics": predicted_metrics(tl.token_ns, prompt_len), "phases": _phases(tl),
            "scheduler": config.describe()}


def peak_rows(chains, units: UnitCosts, gpus, arms, *, requests: int, prompt_len: int,
              non_overlap: float = 0.0) -> list[dict]:
    """The steady full-batch step per GPU x arm x regime (:func:`full_batch_device_ns`), its device
    and host, which sets it, and the peak output tok/s ``vllm bench serve`` reports for it."""
    rows = []
    for gpu in gpus:
        device_ns = full_batch_device_ns(gpu, requests, prompt_len)
        for arm in arms:
            host_ns = chains.core_ns(arm, requests, units)
            for regime, step in both_regimes(device_ns, host_ns, non_overlap).items():
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


def host_at_peak(step_ns: float, device_ns: float, regime: str, non_overlap: float) -> float:
    """The host side of a host-bound step of ``step_ns``: :func:`labkit.step_model.step_time` solved
    for the host (async: step - non_overlap; sync: step - device - non_overlap)."""
    host = step_ns - non_overlap - (device_ns if regime == "sync" else 0.0)
    if host <= 0 or (regime == "async" and host < device_ns):
        raise UsageError(f"a step of {step_ns / 1e6:.2f} ms is not host-bound beside a device of {device_ns / 1e6:.2f} ms")
    return host


def gain_rows(rows: list[dict], gpus) -> list[dict]:
    """Per GPU, after over before (pr40143 over baseline) of the predicted output tok/s, peak and mean
    TPOT (before over after, a time), beside the same ratios of the published table."""
    pub = {"output_tok_s": PR40143.throughput_gain,
           "peak_output_tok_s": PR40143.after.peak_output_tok_s / PR40143.before.peak_output_tok_s,
           "mean_tpot_ms": PR40143.before.mean_tpot_ms / PR40143.after.mean_tpot_ms}
    out = []
    for gpu in gpus:
        got = {(r["arm"], r["metric"]): r["predicted"] for r in rows if r["gpu"] == gpu}
        for metric, published in pub.items():
            before, after = got.get(("baseline", metric)), got.get(("pr40143", metric))
            if not before or not after:
                continue
            ratio = before / after if metric == "mean_tpot_ms" else after / before
            out.append({"arm": "pr40143/baseline", "gpu": gpu, "metric": f"gain_{metric}", "unit": "x",
                        "predicted": ratio, "published": published, "error": (ratio - published) / published,
                        "inferred": None})
    return out


def _check(docs: dict) -> tuple:
    """serve-sim against this machine's recorded server runs (:mod:`labkit.serve.check`): the result
    ``serve_sim_check``, made before anything is predicted."""
    from labkit.serve.check import TOLERANCE, check_rows

    rows, used = check_rows(docs["timeline"])
    params = {"tolerance": TOLERANCE, "timeline": _prov(docs["timeline"]), "costs": used,
              "within_tolerance": sum(abs(r["error"]) <= TOLERANCE for r in rows if r["error"] is not None),
              "rows": len(rows), "note": "simulated against measured: vLLM's real scheduler on the clock, each run's "
                                         "own measured costs; synchronous scheduling (vLLM's CPU build)"}
    return make_result(SERVE_SIM_CHECK, rows, params=params, source="simulated"), used


def predict(workload: ServeWorkload | None = None, gpus=("h200", "h100"), arms=("baseline", "pr40143"), *,
            regime: str = "async", census_machine: str = CENSUS_MACHINE, root=None):
    """The whole comparison (needs vLLM): ``(pr_table, serve_sim_check)``. ``workload`` defaults to
    #40143's, which is compared with the published table (``pr_table``; two quantities of the PR's
    machine inferred); any other workload is filed as ``pr_table_quick`` and compares nothing (the GPU
    node's measured unit costs, this machine's intake)."""
    from labkit.device import describe_machine
    from labkit.machine_load import machine_load
    from labkit.vllm.census.sched_census import write_model_config
    from labkit.vllm.census.bench_vllm_step import require_vllm

    workload = (workload or WORKLOADS["full"]).check()
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
    intake, intake_from = isolated_intake(docs["input"], workload.images)
    overlap = non_overlap_ns(docs["overlap"], regime)
    prompt_len, _ = prompt_layout(workload)
    compare = workload == WORKLOADS["full"]
    size = "full" if compare else "quick"
    named = gpus[0]
    inferred: dict = {}
    units = node
    with machine_load() as load:
        check, _ = _check(docs)
    if compare:
        if "baseline" not in arms:
            raise UsageError("a full run infers the PR host from the baseline arm: include it in --arms")
        devices = {g: full_batch_device_ns(g, workload.requests, prompt_len) for g in gpus}
        peak = PR40143.before.peak_output_tok_s
        step = workload.requests / peak * 1e9
        for g, d in devices.items():
            host_at_peak(step, d, regime, overlap)  # UsageError where the peak says nothing of the host
        host = host_at_peak(step, devices[named], regime, overlap)
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
                        intake=intake, scale=scale, regime=regime, non_overlap=overlap)

        scale = 1.0
        if compare:
            first: dict = {}

            def baseline_ttft(s):
                first[s] = run("baseline", named, s)
                return first[s]["metrics"]["mean_ttft_s"]

            scale, tried = infer_intake(baseline_ttft, PR40143.before.mean_ttft_s)
            runs[("baseline", named)] = first[scale]
            here = (intake.parse_ns + intake.process_ns) / max(1, intake.images)
            inferred["intake_per_image_ms"] = {
                "value": here * scale / 1e6, "scale": scale, "runs": [{"scale": s, "mean_ttft_s": t} for s, t in tried],
                "from": f"baseline mean_ttft_s (published {PR40143.before.mean_ttft_s:g}) on {named}",
                "lab_measured_ms": {census_machine: here / 1e6}, "stages": intake_from}
        for gpu in gpus:
            for arm in arms:
                if (arm, gpu) not in runs:
                    runs[(arm, gpu)] = run(arm, gpu, scale)
    peaks = peak_rows(chains, units, gpus, arms, requests=workload.requests, prompt_len=prompt_len, non_overlap=overlap)
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
    if compare:
        rows += gain_rows(rows, gpus)
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
        "server_timeline": _prov(docs["timeline"]), "overlap": _prov(docs["overlap"]),
        "check": {k: check.params[k] for k in ("within_tolerance", "rows", "tolerance")},
        "census_machine": census_machine, "chains": {a: [(n, asdict(c)) for n, c in pts] for a, pts in chains.points.items()},
        "device": {g: describe_device(g) for g in gpus}, "peaks": peaks, "phases": phases,
        "step_model": f"{regime}: {'max(device, engine-core host)' if regime == 'async' else 'device + host'} + "
                      f"{overlap / 1e6:.3f} ms (vllm_overlap: what neither side hid)", "non_overlap_ns": overlap,
        "scheduler": f"vLLM {version} {'AsyncScheduler' if regime == 'async' else 'Scheduler'} on "
                     f"{describe_machine().get('cpu_model')}", "scheduler_config": runs[(arms[0], named)]["scheduler"],
        "intake": {**vars(intake), **intake_from, "scaled": "every stage by the inferred intake scale: each is one "
                   "thread's CPU work, so a faster or slower host core moves them alike"},
        "machine_load": load,
        "note": "simulated: vLLM's scheduler runs for real, the clock (host from recorded CPU results, device "
                "from the roofline) is simulated; not a GPU measurement",
    }
    return make_result(sized_name(PR_TABLE, size), rows, params=params, source="simulated", size=size), check


def _inferred_from(arm: str, metric: str) -> str | None:
    """Which published figure a row was inferred from (its error is then zero by construction, up to
    the peak's one-second buckets and the secant's tolerance)."""
    if arm == "baseline" and metric == "peak_output_tok_s":
        return "the PR host's cost per tensor read"
    if arm == "baseline" and metric == "mean_ttft_s":
        return "the PR machine's intake per image"
    return None


def _as_side(metrics: dict, rows: list, arm: str, gpu: str):
    from labkit.facts import Published

    peak = next(r["predicted"] for r in rows if (r["arm"], r["gpu"], r["metric"]) == (arm, gpu, "peak_output_tok_s"))
    return Published(metrics["output_tok_s"], peak, metrics["mean_tpot_ms"], metrics["mean_ttft_s"], metrics["duration_s"])


def _prov(doc: dict) -> dict:
    return {k: doc.get(k) for k in ("name", "labkit_commit", "size", "source", "created")} | {
        "machine": (doc.get("machine") or {}).get("slug")}


def _bucket(text: str) -> tuple[int, int]:
    import ast

    try:
        buckets = ast.literal_eval(text)
        (h, w, frames), = [k for k, v in buckets.items() if v]
        if int(frames) != 1:
            raise ValueError
        return int(h), int(w)
    except (ValueError, SyntaxError, TypeError, AttributeError):
        raise UsageError(f"--random-mm-bucket-config {text!r}: one image bucket, e.g. \"{{(1024, 1536, 1): 1.0}}\"") from None


def add_cli_args(p: argparse.ArgumentParser) -> None:
    w = WORKLOADS["full"]
    add_run_options(p, sized=False)
    p.add_argument("--num-prompts", type=int, default=w.requests, help=f"requests, all sent at once (default {w.requests})")
    p.add_argument("--random-mm-base-items-per-request", type=int, default=w.images,
                   help=f"images per request (default {w.images})")
    p.add_argument("--random-mm-bucket-config", default=f"{{({w.image_height}, {w.image_width}, 1): 1.0}}",
                   help="the image size as vllm bench serve's one bucket (default #40143's 1024 x 1536)")
    p.add_argument("--random-input-len", type=int, default=w.text_tokens, help=f"text tokens (default {w.text_tokens})")
    p.add_argument("--random-output-len", type=int, default=w.output_tokens,
                   help=f"output tokens, EOS ignored (default {w.output_tokens}). #40143's run as the defaults is "
                        "compared with its published table (pr_table); any other is filed as pr_table_quick")
    p.add_argument("--gpu", default="h200,h100", help=f"comma list from {', '.join(GPUS)}; the first is the one "
                                                      "the inference runs on (default h200,h100)")
    p.add_argument("--arms", default="baseline,pr40143", help=f"comma list from {', '.join(ARMS)} (default baseline,pr40143)")
    p.add_argument("--regime", choices=REGIMES, default="async", help="async (vLLM's default) or sync scheduling")
    p.add_argument("--census-machine", default=CENSUS_MACHINE,
                   help=f"the machine whose recorded vLLM runs are read (default {CENSUS_MACHINE})")


def main(args: argparse.Namespace) -> int:
    from labkit.machine_load import describe_load

    resolve_run_options(args)
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    h, w = _bucket(args.random_mm_bucket_config)
    workload = ServeWorkload("pr40143", args.num_prompts, args.random_mm_base_items_per_request, h, w,
                             args.random_input_len, args.random_output_len, args.num_prompts)
    if workload != WORKLOADS["full"]:
        workload = replace(workload, name="own")
    result, check = predict(workload, tuple(split(args.gpu)), tuple(split(args.arms)), regime=args.regime,
                            census_machine=args.census_machine)
    print(f"checked against this machine's own server runs (within {check.params['tolerance']:.0%}: "
          f"{check.params['within_tolerance']} of {check.params['rows']}):")
    report(args, {SERVE_SIM_CHECK: check, PR_TABLE: result},
           {SERVE_SIM_CHECK: ("shape", "arm", "metric", "measured", "predicted", "error"),
            PR_TABLE: ("gpu", "arm", "metric", "predicted", "published", "error", "inferred")})
    for name, q in result.params["inferred"].items():
        print(f"inferred {name}: {q['value']:.4g} from {q['from']}")
    print("source: simulated (vLLM's real scheduler on this CPU; simulated clock and device)")
    print(describe_load(result.params.get("machine_load")))
    return 0
