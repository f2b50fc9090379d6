"""Input processing of #40143's images, measured: ``labkit bench vllm-input`` (result ``vllm_input``).

Before a request reaches the scheduler, vLLM's frontend turns each image into model inputs. For
#40143's benchmark shape (128 requests x 32 images of 1024 x 1536, sent by ``vllm bench serve``'s
random-mm dataset as base64 JPEG), on this CPU, per image:

``request_parse``
    the API server's parse of the request's HTTP body before its handler starts: ``json.loads`` of
    the JSON ``vllm bench serve``'s chat backend sends (the request's text and its images as base64
    JPEG data URLs) and validation into vLLM's ``ChatCompletionRequest``, as the chat route does;
    per request, divided by its images (``client_serialize``, the client's ``json.dumps`` of the
    same body, in another process, is recorded beside it);
``media_decode``
    vLLM's own ``ImageMediaIO.load_base64`` on the JPEG ``vllm bench serve`` sends (what the API
    server does with each ``image_url`` before anything else);
``hf_processor``
    the real Hugging Face processor of the Gemma 4 family (the class and configuration a made
    Gemma 4 folder loads, Gemma 4's own image rules: resize within 280 x 9 patches of 16 px,
    2,520 patch rows per image), called alone as vLLM calls it, once per request with all its
    images;
vLLM's stages (``add_request`` on an in-process engine, vLLM's own per-request stage timers, its
``enable_mm_processor_stats`` option; the processor cache at vLLM's default size)
    ``apply_hf_processor`` (the HF processor inside vLLM), ``get_mm_hashes`` (hashing each item),
    ``get_cache_missing_items`` and ``merge_mm_kwargs`` (the processor cache), ``apply_prompt_updates``
    (expanding each image marker to its 262-token placeholder), ``preprocessor_total`` (their sum)
    and ``add_request`` (the whole call: tokenization, the stages above, the request's hand-off to
    the engine core); ``add_request_kernel``: the process's kernel time inside those calls
    (``getrusage``), with the minor page faults per image (``minor_faults_per_image``): the
    processor writes each image's outputs into fresh memory, and where the kernel is slow to hand
    it out (a virtual machine whose host backs guest memory on first touch, transparent huge pages
    compacted on demand) that time lands inside ``apply_hf_processor``. It varies from one
    recording to the next on the same machine (with what the pages were used for shortly before),
    so it is recorded with the stages it inflates;
the same with the processor cache cleared before each request (``..._cache_reset`` rows, the same
    requests again through the same engine): vLLM's processor cache keeps every processed item
    (4 GiB by default), so in the first pass each request's outputs take memory no request freed
    before; cleared, the allocator hands the next request the memory of the previous one. The two
    passes side by side say how much of ``apply_hf_processor`` is the processor and how much the
    memory it is given.

The serving simulation (:mod:`labkit.serve.bench`) reads the image decode and the whole
``add_request`` per image; the PR machine's intake is inferred from its published mean TTFT.
"""

from __future__ import annotations

import argparse
import base64
import io
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from labkit.errors import UsageError

__all__ = ["RESULT_NAME", "SIZES", "CACHE_RESET", "jpeg_images", "chat_body",
           "measure_request_parse", "measure_media_decode",
           "measure_hf_processor", "measure_vllm_stages", "input_rows", "memory_statement", "main"]

logger = logging.getLogger(__name__)

RESULT_NAME = "vllm_input"
#: per size: images per request, requests through vLLM's stages, repeats of the processor alone
SIZES = {"quick": {"images": 4, "requests": 2, "repeats": 2}, "full": {"images": 32, "requests": 6, "repeats": 5}}
#: vLLM's stage timers (``TimingContext``) and the whole add_request call, in pipeline order
#: suffix of the rows of the pass with vLLM's processor cache cleared before each request
CACHE_RESET = "_cache_reset"
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
        t0 = time.perf_counter_ns()
        images.append(io_.load_base64("image/jpeg", data))
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return images, times


def chat_body(b64: list[str], *, text: str = "describe the images", output_len: int = 8000) -> dict:
    """The JSON ``vllm bench serve`` posts for one random-mm request to the chat endpoint (its
    ``openai-chat`` backend: the text first, then one data URL per image; streamed; ``--ignore-eos``)."""
    content = [{"type": "text", "text": text}]
    content += [{"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{data}"}} for data in b64]
    return {"model": "model", "messages": [{"role": "user", "content": content}], "max_completion_tokens": output_len,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}


def measure_request_parse(requests_b64: list[list[str]]) -> tuple[list[float], list[float]]:
    """Per request, us per image of (the client's ``json.dumps`` of its body, the API server's
    ``json.loads`` of it and validation into vLLM's ``ChatCompletionRequest``)."""
    import json

    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    ChatCompletionRequest.model_validate(chat_body(requests_b64[0][:1]))  # first-call set-up, not timed
    dumps, parse = [], []
    for b64 in requests_b64:
        body = chat_body(b64)
        t0 = time.perf_counter_ns()
        raw = json.dumps(body).encode()
        t1 = time.perf_counter_ns()
        ChatCompletionRequest.model_validate(json.loads(raw))
        t2 = time.perf_counter_ns()
        dumps.append((t1 - t0) / 1e3 / len(b64))
        parse.append((t2 - t1) / 1e3 / len(b64))
    return dumps, parse


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
        t0 = time.perf_counter_ns()
        proc(text=prompt, images=plain, return_tensors="pt")
        out.append((time.perf_counter_ns() - t0) / 1e3 / len(images))
    return out, type(proc.image_processor).__name__


def _kernel_and_faults() -> tuple[float, int]:
    """The process's kernel time so far (us) and its minor page faults."""
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_stime * 1e6, use.ru_minflt


def measure_vllm_stages(llm, model_dir, b64_requests: list[list[str]], *, reset_cache: bool = False) -> list[dict]:
    """Per request: vLLM's own stage timers (us per image), ``add_request``'s whole call, and the
    process's kernel time (us per image) and minor page faults (per image) inside that call, each
    request aborted at once (no encoder, no prefill). ``reset_cache``: vLLM's processor cache is
    cleared before each request (``LLM.reset_mm_cache``)."""
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
        rid = f"input-{i}{'-reset' if reset_cache else ''}"
        if reset_cache:
            llm.reset_mm_cache()
        k0, f0 = _kernel_and_faults()
        t0 = time.perf_counter_ns()
        engine.add_request(rid, {"prompt": image_prompt(arch, len(images)), "multi_modal_data": {"image": images}},
                           params)
        total = (time.perf_counter_ns() - t0) / 1e3
        k1, f1 = _kernel_and_faults()
        engine.abort_request([rid])
        stats = list(registry.stat().values())
        if len(stats) != 1:
            raise RuntimeError(f"vLLM's stage timers recorded {len(stats)} entries for one request")
        rec = {"request": i, "images": len(images), "add_request_us": total / len(images),
               "add_request_kernel_us": (k1 - k0) / len(images), "minor_faults": (f1 - f0) / len(images)}
        for stage in VLLM_STAGES:
            rec[f"{stage}_us"] = stats[0].get(f"{stage}_secs", 0.0) * 1e6 / len(images)
        out.append(rec)
    return out


def _row(stage: str, values: list[float], **extra) -> dict:
    return {"stage": stage, "per_image_median_us": float(statistics.median(values)),
            "per_image_min_us": float(min(values)), "per_image_max_us": float(max(values)), "samples": len(values),
            **extra}


def memory_statement(rows) -> dict:
    """How much of vLLM's ``apply_hf_processor`` is the HF processor and how much the memory it is
    given: the processor alone, vLLM's stage with its processor cache kept and cleared before each
    request, and the kernel time and minor faults inside ``add_request`` in both (ms and faults per
    image, medians)."""
    by = {r["stage"]: r for r in rows}
    need = ("hf_processor", "apply_hf_processor", "add_request_kernel", "apply_hf_processor" + CACHE_RESET,
            "add_request_kernel" + CACHE_RESET)
    missing = [k for k in need if k not in by]
    if missing:
        raise UsageError(f"the result lacks the {', '.join(missing)} rows")

    def ms(stage):
        return by[stage]["per_image_median_us"] / 1e3

    out = {"hf_processor_ms": ms("hf_processor"), "apply_hf_processor_ms": ms("apply_hf_processor"),
           "kernel_ms": ms("add_request_kernel"), "faults": by["add_request_kernel"].get("minor_faults_per_image"),
           "apply_hf_processor_reset_ms": ms("apply_hf_processor" + CACHE_RESET),
           "kernel_reset_ms": ms("add_request_kernel" + CACHE_RESET),
           "faults_reset": by["add_request_kernel" + CACHE_RESET].get("minor_faults_per_image")}
    hf, kept, reset = out["hf_processor_ms"], out["apply_hf_processor_ms"], out["apply_hf_processor_reset_ms"]
    out["text"] = (f"The HF processor alone takes {hf:.1f} ms per image; inside vLLM, apply_hf_processor takes "
                   f"{kept:.1f} ms ({kept / hf:.1f}x) with the processor cache kept (vLLM's default), add_request "
                   f"spending {out['kernel_ms']:.1f} ms per image in the kernel ({out['faults']:.0f} minor page faults "
                   f"per image), and {reset:.1f} ms ({reset / hf:.1f}x) with the cache cleared before each request "
                   f"({out['kernel_reset_ms']:.1f} ms in the kernel, {out['faults_reset']:.0f} faults per image).")
    return out


def _parser() -> argparse.ArgumentParser:
    from labkit.cli import add_run_options

    p = argparse.ArgumentParser(prog="labkit bench vllm-input",
                                description="Time the input processing of #40143's images (vLLM's CPU build).")
    p.add_argument("--model", default=None, help="a gemma4 folder made by `labkit vllm make-model` "
                   "(default: one made in the run folder)")
    p.add_argument("--image-size", default="1024x1536", help="image HxW in pixels (default 1024x1536, #40143's)")
    p.add_argument("--images", type=int, default=None, help="images per request (quick 4, full 32)")
    p.add_argument("--requests", type=int, default=None, help="requests through vLLM's stages (quick 2, full 6)")
    p.add_argument("--run-dir", default=None, help="vLLM's caches and the model (default: a temporary folder)")
    add_run_options(p, json_help="also write the result JSON to OUT",
                    size_help="quick (default: 2 requests x 4 images; saved as vllm_input_quick) or full (6 x 32)")
    return p


def main(argv: list[str] | None = None) -> int:
    from labkit.vllm.cli import run_main

    return run_main("labkit bench vllm-input", _main, argv)


def _main(argv: list[str]) -> int:
    from labkit.cli import emit_result, resolve_run_options
    from labkit.machine_load import describe_load
    from labkit.vllm.cli import parse_image_size

    args = _parser().parse_args(argv)
    size = resolve_run_options(args, "labkit bench vllm-input")
    spec = dict(SIZES[size])
    for key in ("images", "requests"):
        if getattr(args, key) is not None:
            if not 1 <= getattr(args, key) <= 64:
                raise UsageError(f"--{key} must be in 1..64")
            spec[key] = getattr(args, key)
    width, height = parse_image_size(args.image_size)
    from labkit.vllm.census.step_bench import require_vllm

    require_vllm()
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-input-") as tmp:
        run_dir = Path(args.run_dir) if args.run_dir else Path(tmp)
        result = run_input(spec, size, run_dir, width=width, height=height, model=args.model)
    width = max(len(r["stage"]) for r in result.rows)
    for r in result.rows:
        print(f"{r['stage']:<{width}} {r['per_image_median_us'] / 1e3:9.2f} ms per image (median of {r['samples']})")
    print(result.params["memory"]["text"])
    print(describe_load(result.params.get("machine_load")))
    emit_result(result, args)
    return 0


def context_length(model, images: int, *, width: int, height: int) -> int:
    """The engine's context for ``images`` placeholders of the made model's architecture at ``width x height``
    px, and 64 tokens of text (1024 x 1536: 262 tokens per image for Gemma 4, 150 for Pixtral)."""
    from labkit.vllm.conformance.models import model_arch, placeholder_layout

    return images * placeholder_layout(model_arch(model), width, height).length + 64


def _measure_all(spec: dict, model, run_dir: Path, b64: list[list[str]], max_model_len: int):
    """Every timing of :func:`run_input`: vLLM's stages (cache kept, then cleared before each request),
    the media decode, the HF processor alone, and vLLM's build."""
    from labkit.vllm.conformance.engine import build_engine, quiet_vllm, shutdown_engine, vllm_build

    dumps, parse = measure_request_parse(b64)
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
            fresh = measure_vllm_stages(llm, model, b64[1:], reset_cache=True)
        finally:
            shutdown_engine(llm)
    return stages, fresh, decode, hf, hf_class, build, (dumps, parse)


def input_rows(spec: dict, model, run_dir: Path, *, width: int, height: int) -> tuple[list[dict], dict]:
    """Every row of the module text for a made model of either architecture (``spec``: images per
    request, requests, repeats; images ``width x height`` px); and what the rows were measured with
    (``hf_image_processor``: the processor's class; ``build``: :func:`labkit.vllm.conformance.engine.vllm_build`)."""
    m = spec["images"]
    b64 = [jpeg_images(m, height, width, seed=r) for r in range(spec["requests"] + 1)]
    stages, fresh, decode, hf, hf_class, build, (dumps, parse) = _measure_all(
        spec, model, run_dir, b64, context_length(model, m, width=width, height=height))
    rows = [_row("request_parse", parse, where="json.loads of the chat request's body + ChatCompletionRequest "
                                               "validation, per request / its images"),
            _row("client_serialize", dumps, where="the client's json.dumps of the same body (another process), "
                                                  "per request / its images"),
            _row("media_decode", decode, where="vLLM ImageMediaIO.load_base64 (JPEG)"),
            _row("hf_processor", hf, where=f"the HF processor alone ({hf_class}), {m} images per call")]
    for suffix, runs, how in (("", stages, "processor cache kept, as vLLM runs"),
                              (CACHE_RESET, fresh, "processor cache cleared before each request")):
        for stage in VLLM_STAGES:
            rows.append(_row(stage + suffix, [s[f"{stage}_us"] for s in runs],
                             where=f"vLLM's stage timers (TimingContext), {how}"))
        rows.append(_row("add_request" + suffix, [s["add_request_us"] for s in runs],
                         where=f"LLMEngine.add_request, whole call, {how}"))
        rows.append(_row("add_request_kernel" + suffix, [s["add_request_kernel_us"] for s in runs],
                         where=f"the process's kernel time inside add_request (getrusage), {how}",
                         minor_faults_per_image=float(statistics.median(s["minor_faults"] for s in runs))))
    return rows, {"hf_image_processor": hf_class, "build": build}


def run_input(spec: dict, size: str, run_dir: Path, *, width: int, height: int, model=None):
    """The measurements of the module text; returns the result (rows per stage, the TTFT statement in params)."""
    from labkit.device import describe_machine
    from labkit.machine_load import machine_load
    from labkit.results import make_result, sized_name
    from labkit.vllm.conformance.models import config_hash, make_model, model_arch

    run_dir.mkdir(parents=True, exist_ok=True)
    model = Path(model) if model is not None else make_model("gemma4", run_dir / "model", force=True, causal_text=True)
    if model_arch(model) != "gemma4":
        raise UsageError("vllm-input needs a gemma4 model folder (labkit vllm make-model --arch gemma4)")
    m = spec["images"]
    with machine_load() as load:
        rows, info = input_rows(spec, model, run_dir, width=width, height=height)
    hf_class, build = info["hf_image_processor"], info["build"]
    params = {"size": size, "image_size": f"{height}x{width}", "images_per_request": m, "requests": spec["requests"],
              "repeats": spec["repeats"], "hf_image_processor": hf_class, "mm_processor_cache_gb": 4,
              "model": {"arch": "gemma4", "config_hash": config_hash(model)},
              **{f"vllm_{k}": v for k, v in build.items()}}
    params["machine_load"] = load
    from labkit.calibrate import IN_RUN_KEY, in_run_calibration

    params[IN_RUN_KEY] = in_run_calibration()  # the unit costs of the same hour
    params["memory"] = memory_statement(rows)
    return make_result(sized_name(RESULT_NAME, size), rows, params=params, source="measured-cpu", size=size,
                       machine=describe_machine("cpu"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
