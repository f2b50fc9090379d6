"""``labkit bench serve-sim``: #40143's published table beside the one step model's full-batch peaks
(result ``pr_table``). The whole-run figures (output tok/s, mean TPOT and TTFT, duration and their
gains) are filed beside their published values unpredicted: docs/serve-sim.md says why.

More: docs/reference.md, ``labkit.serve.bench_serve_sim``.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict, replace
from pathlib import Path

from labkit.bench import add_run_options, report, resolve_run_options
from labkit.errors import UsageError
from labkit.facts import METRICS, PR40143
from labkit.gpu.device_model import GPUS, describe_device, full_batch_device_ns
from labkit.results import CALIBRATION, PR_TABLE, VLLM_OVERLAP, VLLM_STEP, find, make_result, results_root, sized_name
from labkit.serve.host import UnitCosts, chains_from_census, infer_read_ns, measured_units
from labkit.step_model import REGIMES, both_regimes, peak_tokens_per_s
from labkit.vllm.serving import WORKLOADS, ServeWorkload, prompt_layout

__all__ = ["ARMS", "CENSUS_MACHINE", "GPU_NODE", "WHOLE_RUN", "non_overlap_ns", "peak_rows", "host_at_peak",
           "gain_rows", "predict", "add_cli_args", "main"]

ARMS = ("baseline", "pr40143", "merged", "early-return")
#: the machine whose census is read by default
CENSUS_MACHINE = "cpu-epyc-2c"
#: the lab's GPU node, whose calibration prices the Python-loop units on the PR's machine
GPU_NODE = "h200"
#: why the whole-run figures are filed unpredicted (docs/serve-sim.md, "What the lab does not predict")
WHOLE_RUN = ("not predicted: a run's whole-run figures turn on how its server hands requests to the engine and "
             "whether the first requests' outputs outlast the others' prefills, which the PR's machine set and the "
             "lab cannot time (see vllm_serve_timeline for how far they move on this CPU's own server)")

#: what serve-sim reads, each through the results store: key -> (result name, role)
INPUTS = {"census": (VLLM_STEP, "the census of vLLM's step (labkit bench vllm-step)"),
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
    """Per GPU, after over before (pr40143 over baseline) of output tok/s, peak and mean TPOT (before
    over after, a time) beside the same ratios of the published table; ``predicted`` and ``error``
    are None where either arm's figure is not predicted."""
    pub = {"output_tok_s": PR40143.throughput_gain,
           "peak_output_tok_s": PR40143.after.peak_output_tok_s / PR40143.before.peak_output_tok_s,
           "mean_tpot_ms": PR40143.before.mean_tpot_ms / PR40143.after.mean_tpot_ms}
    out = []
    for gpu in gpus:
        got = {(r["arm"], r["metric"]): r["predicted"] for r in rows if r["gpu"] == gpu}
        for metric, published in pub.items():
            before, after = got.get(("baseline", metric)), got.get(("pr40143", metric))
            ratio = None if not before or not after else before / after if metric == "mean_tpot_ms" else after / before
            out.append({"arm": "pr40143/baseline", "gpu": gpu, "metric": f"gain_{metric}", "unit": "x",
                        "predicted": ratio, "published": published,
                        "error": None if ratio is None else (ratio - published) / published, "inferred": None})
    return out


def predict(workload: ServeWorkload | None = None, gpus=("h200", "h100"), arms=("baseline", "pr40143"), *,
            regime: str = "async", census_machine: str = CENSUS_MACHINE, root=None):
    """``pr_table``: the full-batch peaks per GPU and arm from the step model. ``workload`` defaults to
    #40143's, which is set beside the published table (the PR host's cost per tensor read inferred
    from the baseline's published peak); any other is filed as ``pr_table_quick``, priced at the GPU
    node's measured unit costs, and compares nothing."""
    workload = (workload or WORKLOADS["full"]).check()
    if regime not in REGIMES:
        raise UsageError(f"--regime must be one of {', '.join(REGIMES)}")
    bad = [g for g in gpus if g not in GPUS] + [a for a in arms if a not in ARMS]
    if bad or not gpus or not arms:
        raise UsageError(f"choose GPUs from {', '.join(GPUS)} and arms from {', '.join(ARMS)} (got {', '.join(bad)})")
    root = Path(root) if root is not None else results_root()
    docs = _inputs(root, census_machine)
    chains = chains_from_census(docs["census"], arms, workload.images)
    node = UnitCosts.from_rows(docs["node"]["rows"], f"{GPU_NODE}/{docs['node'].get('name', 'calibration')}")
    overlap = non_overlap_ns(docs["overlap"], regime)
    prompt_len, _ = prompt_layout(workload)
    compare = workload == WORKLOADS["full"]
    named, units, inferred = gpus[0], node, {}
    if compare:
        if "baseline" not in arms:
            raise UsageError("a full run infers the PR host from the baseline arm: include it in --arms")
        step = workload.requests / PR40143.before.peak_output_tok_s * 1e9
        # every GPU's (UsageError where the peak says nothing of the host); the named one's is used
        host = {g: host_at_peak(step, full_batch_device_ns(g, workload.requests, prompt_len), regime, overlap)
                for g in gpus}[named]
        got = infer_read_ns(chains, host_ns=host, requests=workload.requests, loop_ns=node.loop_ns)
        units = UnitCosts(got["read_ns"], node.loop_ns, "read: inferred from the baseline's published peak; "
                                                        f"loop: {node.where} (measured there)")
        inferred["read_ns"] = {**got, "value": got["read_ns"], "step_ns": step,
                               "from": f"baseline peak_output_tok_s (published {PR40143.before.peak_output_tok_s:g}): "
                                       f"the full-batch step is requests / peak, host-bound; its host side solved "
                                       f"from the step model ({regime})",
                               "lab_measured_ns": _range(measured_units(root), "read_ns")}
    peaks = peak_rows(chains, units, gpus, arms, requests=workload.requests, prompt_len=prompt_len, non_overlap=overlap)
    rows = []
    for gpu in gpus:
        for arm in arms:
            peak = next(p["peak_output_tok_s"] for p in peaks if (p["gpu"], p["arm"], p["regime"]) == (gpu, arm, regime))
            side = PR40143.side(arm) if compare and arm in ("baseline", "pr40143") else None
            for metric, unit in METRICS.items():
                got = peak if metric == "peak_output_tok_s" else None
                pub = side.get(metric) if side else None
                rows.append({"arm": arm, "gpu": gpu, "metric": metric, "unit": unit, "predicted": got, "published": pub,
                             "error": None if pub is None or got is None else (got - pub) / pub,
                             "inferred": "the PR host's cost per tensor read"
                                         if compare and (arm, metric) == ("baseline", "peak_output_tok_s") else None})
    if compare:
        rows += gain_rows(rows, gpus)
    size = "full" if compare else "quick"
    params = {
        "size": size, "gpu": named, "gpus": list(gpus), "arms": list(arms), "regime": regime,
        "workload": workload.describe(), "prompt_tokens": prompt_len, "published": PR40143.name if compare else None,
        "fitted": {}, "inferred": inferred, "whole_run": WHOLE_RUN, "units": asdict(units),
        "gpu_node_units": asdict(node), "census": _prov(docs["census"]), "gpu_node": _prov(docs["node"]),
        "overlap": _prov(docs["overlap"]), "census_machine": census_machine,
        "chains": {a: [(n, asdict(c)) for n, c in pts] for a, pts in chains.points.items()},
        "device": {g: describe_device(g) for g in gpus}, "peaks": peaks,
        "step_model": f"{regime}: {'max(device, engine-core host)' if regime == 'async' else 'device + host'} + "
                      f"{overlap / 1e6:.3f} ms (vllm_overlap: what neither side hid)", "non_overlap_ns": overlap,
        "note": "simulated: the step model over a host from recorded CPU results and a device from the roofline; "
                "not a GPU measurement",
    }
    return make_result(sized_name(PR_TABLE, size), rows, params=params, source="simulated", size=size)


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
    p.add_argument("--num-prompts", type=int, default=w.requests, help=f"requests, all decoding at the peak (default {w.requests})")
    p.add_argument("--random-mm-base-items-per-request", type=int, default=w.images,
                   help=f"images per request (default {w.images})")
    p.add_argument("--random-mm-bucket-config", default=f"{{({w.image_height}, {w.image_width}, 1): 1.0}}",
                   help="the image size as vllm bench serve's one bucket (default #40143's 1024 x 1536)")
    p.add_argument("--random-input-len", type=int, default=w.text_tokens, help=f"text tokens (default {w.text_tokens})")
    p.add_argument("--random-output-len", type=int, default=w.output_tokens,
                   help=f"output tokens (default {w.output_tokens}; the peak is the first full-batch decode step, "
                        "so it does not move it). #40143's run as the defaults is set beside its published table "
                        "(pr_table); any other is filed as pr_table_quick")
    p.add_argument("--gpu", default="h200,h100", help=f"comma list from {', '.join(GPUS)}; the first is the one "
                                                      "the inference runs on (default h200,h100)")
    p.add_argument("--arms", default="baseline,pr40143", help=f"comma list from {', '.join(ARMS)} (default baseline,pr40143)")
    p.add_argument("--regime", choices=REGIMES, default="async", help="async (vLLM's default) or sync scheduling")
    p.add_argument("--census-machine", default=CENSUS_MACHINE,
                   help=f"the machine whose recorded vLLM runs are read (default {CENSUS_MACHINE})")


def main(args: argparse.Namespace) -> int:
    resolve_run_options(args)
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    h, w = _bucket(args.random_mm_bucket_config)
    workload = ServeWorkload("pr40143", args.num_prompts, args.random_mm_base_items_per_request, h, w,
                             args.random_input_len, args.random_output_len, args.num_prompts)
    if workload != WORKLOADS["full"]:
        workload = replace(workload, name="own")
    result = predict(workload, tuple(split(args.gpu)), tuple(split(args.arms)), regime=args.regime,
                     census_machine=args.census_machine)
    report(args, result, ("gpu", "arm", "metric", "predicted", "published", "error", "inferred"))
    for name, q in result.params["inferred"].items():
        print(f"inferred {name}: {q['value']:.4g} from {q['from']}")
    print(f"whole-run figures: {WHOLE_RUN}")
    print("source: simulated (the step model over recorded CPU results and the GPU roofline)")
    return 0
