"""Filing ``vllm bench serve`` results of the PR A/B in the results store (result ``vllm_ab``).

More: docs/reference.md, ``labkit.vllm.server.ab_results``.
"""

from __future__ import annotations

import json
from pathlib import Path

from labkit.errors import UsageError
from labkit.fileio import copy_atomic
from labkit.results import VLLM_AB, data_root, find_all, make_result, save_result
from labkit.vllm.server.timeline import ingest_timeline
from labkit.vllm.variants import ENV_VAR, get_variant


#: keys every ``vllm bench serve --save-result`` JSON has (facts F.2)
REQUIRED_BENCH_KEYS = ("duration", "completed", "output_throughput", "mean_tpot_ms", "mean_ttft_ms")

_SCALARS = {
    "duration": "duration_s",
    "completed": "completed",
    "failed": "failed",
    "total_input_tokens": "total_input_tokens",
    "total_output_tokens": "total_output_tokens",
    "request_throughput": "request_throughput_req_s",
    "output_throughput": "output_throughput_tok_s",
    "total_token_throughput": "total_token_throughput_tok_s",
    "max_output_tokens_per_s": "max_output_tokens_per_s",
    "max_concurrent_requests": "max_concurrent_requests",
}
_LATENCIES = [f"{stat}_{metric}" for metric in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "std", "p99")]


def bench_row(bench: dict, *, variant: str, images: int | None = None, model: str | None = None,
              repeat: int | None = None, order: int | None = None) -> dict:
    """One flat results row from a ``vllm bench serve`` JSON object (``*_ms`` become ``*_us``)."""
    if not isinstance(bench, dict):
        raise UsageError("the bench file does not hold a JSON object")
    missing = [k for k in REQUIRED_BENCH_KEYS if k not in bench]
    if missing:
        raise UsageError(f"not a `vllm bench serve` result: missing key(s) {', '.join(missing)}")
    v = get_variant(variant)
    row: dict = {"variant": v.name, "placeholder": v.placeholder, "prefix_range": v.prefix_range,
                 "model": model or bench.get("model_id"),
                 "num_prompts": bench.get("num_prompts", bench.get("completed")), "images_per_request": images,
                 "repeat": repeat, "order": order}
    for key, out in _SCALARS.items():
        if key in bench:
            row[out] = _number(bench[key], key)
    for key in _LATENCIES:
        ms = f"{key}_ms"
        if ms in bench and bench[ms] is not None:
            row[f"{key}_us"] = _number(bench[ms], ms) * 1e3
    return row


def _number(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"bench key {key!r} is not a number: {value!r}")
    return value


def _machine_for(gpu_name: str | None, device: str) -> dict:
    from labkit.device import describe_machine, machine_slug

    desc = dict(describe_machine("cpu" if device == "cpu" else None))
    if device == "cpu":
        return desc
    if gpu_name:
        desc.update(device="cuda", gpu_name=gpu_name, gpu_memory_gib=None, gpu_sm_count=None, gpu_capability=None)
        desc["slug"] = machine_slug(desc)
    elif not desc.get("gpu_name"):
        raise UsageError(
            "no GPU here: ingest on the machine that ran `vllm bench serve`, or pass --gpu-name "
            "with the GPU it ran on (or --device cpu for a run of vLLM's CPU build)"
        )
    return desc


#: what the CPU build's attention path has of #38794 (vLLM 0.32's CPU_ATTN backend)
CPU_PREFIX_RANGES = ("none: vLLM's CPU attention backend has no multimodal prefix ranges, so #38794's "
                     "per-step tensor does not exist there and pr38794 equals baseline")


def _model_params(model: str | None) -> dict:
    """The made model's architecture and config hash, where ``model`` is a folder made by the lab."""
    if not model or not Path(model).is_dir():
        return {}
    from labkit.vllm.conformance.models import config_hash, model_arch

    try:
        return {"model_arch": model_arch(model), "model_config_hash": config_hash(model)}
    except UsageError:
        return {"model_config_hash": config_hash(model)}


def _vllm_build() -> dict:
    try:
        import importlib.metadata as md

        dists = md.packages_distributions().get("vllm") or []
        dist = dists[0] if dists else None
        return {"vllm_distribution": dist, "vllm_version": md.version(dist) if dist else None}
    except Exception:  # noqa: BLE001 - a record without the build is still a record
        return {"vllm_distribution": None, "vllm_version": None}


def ingest(bench_json: str | Path, *, variant: str, images: int | None = None, model: str | None = None,
           trace_dir: str | Path | None = None, gpu_name: str | None = None, results_root: str | Path | None = None,
           traces_root: str | Path | None = None, repeat: int | None = None, order: int | None = None,
           device: str = "cuda", shape: dict | None = None, server_log: str | Path | None = None,
           timers: str | Path | None = None) -> Path:
    """File one ``vllm bench serve`` JSON (and optional profiler traces) under result ``vllm_ab``.

    ``device="cpu"``: a run of vLLM's CPU build on this machine (source ``measured-cpu``; the
    params say the CPU attention path has no prefix ranges). ``repeat`` / ``order``: which
    repeat this was and its place in the alternating order. ``shape``: image size, input and
    output lengths, filed in the params. Rows from earlier ingests on the same machine are
    kept, except one with the same variant, model, prompts, images and repeat, which this one
    replaces; rows of another shape or vLLM build are dropped (one result, one run). Traces
    (``*.pt.trace.json.gz`` / ``*.pt.trace.json``) are copied to
    ``<traces_root>/<slug>/vllm_ab/<variant>/`` and named in the row. ``server_log``: the server's log of
    a ``--timeline`` run: its requests and steps are filed under ``vllm_serve_timeline`` instead
    (:mod:`labkit.vllm.server.timeline`), ``vllm_ab`` left as it is. Returns the result path.
    """
    path = Path(bench_json)
    try:
        bench = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"bench file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read bench file {path}: {exc}") from None
    if device not in ("cuda", "cpu"):
        raise UsageError(f"device must be cuda or cpu, got {device!r}")
    row = bench_row(bench, variant=variant, images=images, model=model, repeat=repeat, order=order)
    traces: list[Path] = []
    if trace_dir is not None:
        tdir = Path(trace_dir)
        if not tdir.is_dir():
            raise UsageError(f"trace folder not found: {tdir}")
        traces = sorted(p for p in tdir.rglob("*") if p.name.endswith((".pt.trace.json.gz", ".pt.trace.json")))
        if not traces:
            raise UsageError(f"no *.pt.trace.json[.gz] files under {tdir}")
    machine = _machine_for(gpu_name, device)
    slug = machine["slug"]
    if traces:
        dest = Path(traces_root) if traces_root is not None else data_root() / "traces"
        dest = dest / slug / VLLM_AB / row["variant"]
        dest.mkdir(parents=True, exist_ok=True)
        row["trace_files"] = []
        for t in traces:
            copy_atomic(t, dest / t.name)
            row["trace_files"].append(str(dest / t.name))
    key = ("variant", "model", "num_prompts", "images_per_request", "repeat")
    build = _vllm_build()
    params = {"vllm_version": bench.get("vllm_version") or build["vllm_version"] or _vllm_version(),
              "vllm_distribution": build["vllm_distribution"], "env_var": ENV_VAR, "device": device,
              **_model_params(model), "shape": dict(shape or {}, num_prompts=row["num_prompts"], images=images)}
    if device == "cpu":
        params["prefix_ranges"] = CPU_PREFIX_RANGES
    previous = next(iter(find_all(VLLM_AB, machine=slug, root=results_root)), None)
    same_run = previous is not None and all(previous.params.get(k) == params.get(k)
                                            for k in ("vllm_version", "vllm_distribution", "shape", "device"))
    rows = [r for r in (previous.rows if same_run else []) if tuple(r.get(k) for k in key) != tuple(row[k] for k in key)]
    rows.append(row)
    rows.sort(key=lambda r: (r.get("order") is None, r.get("order") or 0))
    source = "measured-cpu" if device == "cpu" else "measured-gpu"
    if server_log is not None:
        return ingest_timeline(bench, server_log, variant=row["variant"], repeat=repeat, machine=machine,
                               shape={k: params["shape"].get(k) for k in ("num_prompts", "images", "image_size",
                                                                          "output_len")},
                               vllm_version=params["vllm_version"], timers=timers, results_root=results_root)
    result = make_result(VLLM_AB, rows, params=params, source=source, machine=machine)
    return save_result(result, root=results_root)


def _vllm_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        return None


#: the metrics :func:`variant_summary` summarises (row keys)
SUMMARY_METRICS = ("duration_s", "request_throughput_req_s", "output_throughput_tok_s", "mean_tpot_us",
                   "median_tpot_us", "mean_itl_us", "median_itl_us", "mean_ttft_us", "median_ttft_us")


def variant_summary(rows: list[dict]):
    """One row per variant over its repeats: per metric the median, ``_min``, ``_max`` and ``_spread``."""
    import pandas as pd

    df = pd.DataFrame(rows)
    if df.empty:
        return df
    out = []
    for name, g in df.groupby("variant", sort=False):
        rec = {"variant": name, "repeats": int(len(g))}
        for m in SUMMARY_METRICS:
            if m in g and g[m].notna().any():
                rec[m] = float(g[m].median())
                rec[f"{m}_min"], rec[f"{m}_max"] = float(g[m].min()), float(g[m].max())
                rec[f"{m}_spread"] = rec[f"{m}_max"] - rec[f"{m}_min"]
        out.append(rec)
    table = pd.DataFrame(out)
    if "merged" in set(table["variant"]) and "mean_tpot_us" in table:
        merged_max = table.set_index("variant").loc["merged", "mean_tpot_us_max"]
        table["tpot_above_merged_all"] = table["mean_tpot_us_min"] > merged_max
    return table


def ab_table(rows: list[dict], baseline: str = "baseline"):
    """DataFrame of A/B rows with ``output_throughput_ratio`` and ``mean_tpot_ratio`` to ``baseline``."""
    import pandas as pd

    df = pd.DataFrame(rows)
    if df.empty:
        return df
    group = ["model", "num_prompts", "images_per_request"]
    base = df[df["variant"] == baseline].set_index(group)
    out = []
    for _, r in df.iterrows():
        k = tuple(r[g] for g in group)
        rec = r.to_dict()
        if k in base.index:
            b = base.loc[k]
            b = b.iloc[0] if hasattr(b, "iloc") and getattr(b, "ndim", 1) > 1 else b
            rec["output_throughput_ratio"] = r["output_throughput_tok_s"] / b["output_throughput_tok_s"]
            rec["mean_tpot_ratio"] = r["mean_tpot_us"] / b["mean_tpot_us"]
        out.append(rec)
    return pd.DataFrame(out)
