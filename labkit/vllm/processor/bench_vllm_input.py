"""Input processing of #40143's images, measured: ``labkit bench vllm-input`` (result ``vllm_input``).

More: docs/reference.md, ``labkit.vllm.processor.bench_vllm_input``.
"""

from __future__ import annotations

import argparse
import base64
import io
import statistics
import tempfile
from pathlib import Path

from labkit.bench import Bench, add_run_options, parse_image_size, report, resolve_run_options
from labkit.errors import UsageError
from labkit.results import IN_RUN_KEY, VLLM_INPUT
from labkit.timing import stopwatch

__all__ = ["INPUT", "jpeg_images", "measure_media_decode", "measure_hf_processor",
           "measure_vllm_stages", "input_rows", "main"]

#: the result: images per request, requests through vLLM's stages, repeats of the processor alone at each
#: size; its table (not a sweep: the stages of one engine, measured in :func:`input_rows`)
INPUT = Bench(VLLM_INPUT, knobs={"images": (4, 32), "requests": (2, 6), "repeats": (2, 5)},
              columns=("stage", "per_image_median_us", "per_image_min_us", "per_image_max_us", "samples"))
#: vLLM's stage timers (``TimingContext``), in pipeline order
VLLM_STAGES = ("get_mm_hashes", "get_cache_missing_items", "apply_hf_processor", "merge_mm_kwargs",
               "apply_prompt_updates", "preprocessor_total")


def jpeg_images(count: int, height: int, width: int, seed: int = 0) -> list[str]:
    """``count`` uniform-random RGB images as base64 JPEG, as ``vllm bench serve``'s random-mm sends them."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        img = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        buf = io.BytesIO()
        img.save(buf, format="JPEG")
        out.append(base64.b64encode(buf.getvalue()).decode("ascii"))
    return out


def _decode(b64: list[str]) -> tuple[list, list[float]]:
    from vllm.multimodal.media.image import ImageMediaIO

    io_ = ImageMediaIO()
    images, times = [], []
    for data in b64:
        with stopwatch() as sw:
            images.append(io_.load_base64("image/jpeg", data))
        times.append(sw.ns / 1e3)
    return images, times


def measure_media_decode(b64: list[str]) -> list[float]:
    """us per image of vLLM's ``ImageMediaIO.load_base64`` (JPEG decode, RGB conversion)."""
    return _decode(b64)[1]


def measure_hf_processor(model_dir, images, *, repeats: int = 3) -> tuple[list[float], str]:
    """us per image of the HF processor alone, called once with all ``images`` (as vLLM does per request),
    ``repeats`` times; and the processor's image-processor class."""
    from transformers import AutoProcessor

    from labkit.vllm.conformance.models import image_prompt, model_arch

    proc = AutoProcessor.from_pretrained(str(model_dir))
    arch = model_arch(model_dir)
    prompt = image_prompt(arch, len(images))
    plain = [getattr(im, "media", im) for im in images]
    proc(text=image_prompt(arch, 1), images=plain[:1], return_tensors="pt")  # first-call set-up, not timed
    out = []
    for _ in range(repeats):
        with stopwatch() as sw:
            proc(text=prompt, images=plain, return_tensors="pt")
        out.append(sw.ns / 1e3 / len(images))
    return out, type(proc.image_processor).__name__


def measure_vllm_stages(llm, model_dir, b64_requests: list[list[str]]) -> list[dict]:
    """Per request: vLLM's own stage timers and ``add_request``'s whole call (us per image), each
    request aborted at once (no encoder, no prefill)."""
    from vllm import SamplingParams

    from labkit.vllm.conformance.models import image_prompt, model_arch

    engine = llm.llm_engine
    registry = engine.renderer._mm_timing_registry  # vLLM's own per-request stage timers
    registry.stat()  # drop anything recorded before
    params = SamplingParams(max_tokens=1)
    arch = model_arch(model_dir)
    out = []
    for i, b64 in enumerate(b64_requests):
        images, _ = _decode(b64)
        rid = f"input-{i}"
        with stopwatch() as sw:
            engine.add_request(rid, {"prompt": image_prompt(arch, len(images)), "multi_modal_data": {"image": images}},
                               params)
        total = sw.ns / 1e3
        engine.abort_request([rid])
        stats = list(registry.stat().values())
        if len(stats) != 1:
            raise RuntimeError(f"vLLM's stage timers recorded {len(stats)} entries for one request")
        out.append({"request": i, "images": len(images), "add_request_us": total / len(images),
                    **{f"{stage}_us": stats[0].get(f"{stage}_secs", 0.0) * 1e6 / len(images) for stage in VLLM_STAGES}})
    return out


def _row(stage: str, values: list[float], **extra) -> dict:
    return {"stage": stage, "per_image_median_us": float(statistics.median(values)),
            "per_image_min_us": float(min(values)), "per_image_max_us": float(max(values)), "samples": len(values),
            **extra}


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a gemma4 folder made by `labkit vllm make-model` "
                   "(default: one made in the run folder)")
    p.add_argument("--image-size", default="1024x1536", help="image HxW in pixels (default 1024x1536, #40143's)")
    p.add_argument("--images", type=int, default=None, help="images per request (quick 4, full 32)")
    p.add_argument("--requests", type=int, default=None, help="requests through vLLM's stages (quick 2, full 6)")
    p.add_argument("--run-dir", default=None, help="vLLM's caches and the model (default: a temporary folder)")
    add_run_options(p, size_help="quick (default: 2 requests x 4 images; saved as vllm_input_quick) or full (6 x 32)")


def main(args: argparse.Namespace) -> int:
    from labkit.machine_load import describe_load
    from labkit.vllm.census.bench_vllm_step import require_vllm

    size = resolve_run_options(args)
    for key in ("images", "requests"):
        if getattr(args, key) is not None and not 1 <= getattr(args, key) <= 64:
            raise UsageError(f"--{key} must be in 1..64")
    spec = INPUT.at(size, images=args.images, requests=args.requests)
    width, height = parse_image_size(args.image_size)
    require_vllm()
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-input-") as tmp:
        run_dir = Path(args.run_dir) if args.run_dir else Path(tmp)
        result = run_input(spec, size, run_dir, width=width, height=height, model=args.model)
    report(args, result, INPUT.columns)
    print(describe_load(result.params.get("machine_load")))
    return 0


def context_length(model, images: int, *, width: int, height: int) -> int:
    """The engine's context for ``images`` placeholders of the made model's architecture at ``width x height``
    px, and 64 tokens of text (1024 x 1536: 262 tokens per image for Gemma 4, 150 for Pixtral)."""
    from labkit.vllm.conformance.models import model_arch, placeholder_layout

    return images * placeholder_layout(model_arch(model), width, height).length + 64


def _measure_all(spec: dict, model, run_dir: Path, b64: list[list[str]], max_model_len: int):
    """Every timing of :func:`run_input`: vLLM's stages, the media decode, the HF processor alone, and
    vLLM's build."""
    from labkit.vllm.conformance.engine import build_engine, quiet_vllm, shutdown_engine, vllm_build

    decode = [t for req in b64 for t in measure_media_decode(req)]
    images, _ = _decode(b64[0])
    hf, hf_class = measure_hf_processor(model, images, repeats=spec["repeats"])
    with quiet_vllm():
        llm = build_engine(model, run_dir, images_per_prompt=spec["images"], max_num_seqs=4,
                           max_model_len=max_model_len, enable_mm_processor_stats=True,
                           mm_processor_cache_gb=4)
        try:
            build = vllm_build()
            stages = measure_vllm_stages(llm, model, b64[1:])
        finally:
            shutdown_engine(llm)
    return stages, decode, hf, hf_class, build


def input_rows(spec: dict, model, run_dir: Path, *, width: int, height: int) -> tuple[list[dict], dict]:
    """Every row of the module text for a made model of either architecture (``spec``: images per
    request, requests, repeats; images ``width x height`` px); and what the rows were measured with
    (``hf_image_processor``: the processor's class; ``build``: :func:`labkit.vllm.conformance.engine.vllm_build`)."""
    m = spec["images"]
    b64 = [jpeg_images(m, height, width, seed=r) for r in range(spec["requests"] + 1)]
    stages, decode, hf, hf_class, build = _measure_all(spec, model, run_dir, b64,
                                                      context_length(model, m, width=width, height=height))
    rows = [_row("media_decode", decode, where="vLLM ImageMediaIO.load_base64 (JPEG)"),
            _row("hf_processor", hf, where=f"the HF processor alone ({hf_class}), {m} images per call"),
            *(_row(stage, [s[f"{stage}_us"] for s in stages],
                   where="vLLM's stage timers (TimingContext), processor cache kept, as vLLM runs")
              for stage in VLLM_STAGES)]
    rows.append(_row("add_request", [s["add_request_us"] for s in stages],
                     where="LLMEngine.add_request, whole call, processor cache kept, as vLLM runs"))
    return rows, {"hf_image_processor": hf_class, "build": build}


def run_input(spec: dict, size: str, run_dir: Path, *, width: int, height: int, model=None):
    """The measurements of the module text; returns the result (rows per stage, the TTFT statement in params)."""
    from labkit.device import describe_machine
    from labkit.machine_load import machine_load
    from labkit.timing import in_run_calibration
    from labkit.vllm.conformance.models import config_hash, make_model, model_arch

    run_dir.mkdir(parents=True, exist_ok=True)
    model = Path(model) if model is not None else make_model("gemma4", run_dir / "model", force=True, causal_text=True)
    if model_arch(model) != "gemma4":
        raise UsageError("vllm-input needs a gemma4 model folder (labkit vllm make-model --arch gemma4)")
    m = spec["images"]
    with machine_load() as load:
        rows, info = input_rows(spec, model, run_dir, width=width, height=height)
    hf_class, build = info["hf_image_processor"], info["build"]
    params = {"image_size": f"{height}x{width}", "images_per_request": m, "requests": spec["requests"],
              "repeats": spec["repeats"], "hf_image_processor": hf_class, "mm_processor_cache_gb": 4,
              "model": {"arch": "gemma4", "config_hash": config_hash(model)},
              **{f"vllm_{k}": v for k, v in build.items()}, "machine_load": load,
              IN_RUN_KEY: in_run_calibration()}  # the unit costs of the same hour
    return INPUT.result(rows, size, params=params, machine=describe_machine("cpu"))

