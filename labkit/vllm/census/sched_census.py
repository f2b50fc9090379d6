"""What a decode step of vLLM's real ``Scheduler`` costs on the host, for multimodal vs text-only batches.

More: docs/reference.md, ``labkit.vllm.census.sched_census``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator
from labkit.timing import clock_ns, nearest_rank

__all__ = ["VARIANTS", "early_return_patch", "make_scheduler", "vllm_requests", "make_requests", "SchedulerRun", "measure_point",
           "profile_step", "temporary_model_dir", "write_model_config"]

#: variants timed at every grid point, in the order they are interleaved
VARIANTS = ("text", "installed", "early_return")
#: Gemma-style image: 256 soft tokens between a start and an end token
PLACEHOLDER_LEN = 258
TEXT_BETWEEN = 16

_GEMMA3_CONFIG = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
    "mm_tokens_per_image": 256,
    "text_config": {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
                    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                    "head_dim": 32, "vocab_size": 262208, "sliding_window": 1024,
                    "max_position_embeddings": 131072, "rope_theta": 1000000.0,
                    "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 32},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                      "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 896, "patch_size": 14},
    "torch_dtype": "float32",
}


# --------------------------------------------------------------------------------------
# The patch, in-process
# --------------------------------------------------------------------------------------


def _make_early_return(installed):
    def _try_schedule_encoder_inputs(self, request, num_computed_tokens, num_new_tokens, encoder_compute_budget,
                                     shift_computed_tokens=0):
        feats = request.mm_features
        if feats and not self.is_encoder_decoder:
            last = feats[-1].mm_position
            if last.offset + last.length <= num_computed_tokens:
                # every item is in the KV cache: the window would be empty
                return [], num_new_tokens, encoder_compute_budget, [], []
        return installed(self, request, num_computed_tokens, num_new_tokens, encoder_compute_budget,
                         shift_computed_tokens)

    _try_schedule_encoder_inputs.labkit_early_return = True
    return _try_schedule_encoder_inputs


@contextlib.contextmanager
def early_return_patch() -> Iterator[None]:
    """Inside the block, vLLM's ``Scheduler._try_schedule_encoder_inputs`` returns early as
    ``patches/vllm-0.33.0-encoder-early-return.diff`` makes it (vLLM >= 0.21)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    installed = Scheduler.__dict__["_try_schedule_encoder_inputs"]
    Scheduler._try_schedule_encoder_inputs = _make_early_return(installed)
    try:
        yield
    finally:
        Scheduler._try_schedule_encoder_inputs = installed


# --------------------------------------------------------------------------------------
# A real scheduler from a generated configuration
# --------------------------------------------------------------------------------------


def _budget_class(max_item_tokens: int, budget: int = 0):
    class _Budget:
        """Stand-in for vLLM's ``MultiModalBudget``: the numbers the scheduler reads."""

        def __init__(self, vllm_config, mm_registry, **_kw) -> None:
            n = max(vllm_config.scheduler_config.max_num_batched_tokens, max_item_tokens, budget)
            self.encoder_compute_budget = n
            self.encoder_cache_size = n
            self.mm_max_toks_per_item = {"image": max_item_tokens}

    return _Budget


def write_model_config(folder: str | os.PathLike) -> Path:
    """Write the tiny Gemma-3 ``config.json`` the scheduler's model config reads; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(_GEMMA3_CONFIG), encoding="utf-8")
    return folder


def make_scheduler(model_dir: str | os.PathLike, *, max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                   max_model_len: int = 32768, num_blocks: int = 200_000, block_size: int = 16,
                   enable_prefix_caching: bool = False, max_item_tokens: int = PLACEHOLDER_LEN,
                   async_scheduling: bool = False, encoder_budget: int = 0, **scheduler_config):
    """vLLM's real ``Scheduler`` for the generated config, on the CPU (no async scheduling, no prefix caching).

    ``async_scheduling``: vLLM's ``AsyncScheduler`` instead; ``encoder_budget``: the encoder's budget where
    above the batched tokens; ``scheduler_config``: more fields of vLLM's ``SchedulerConfig``."""
    import torch
    import vllm.v1.core.sched.scheduler as vsched
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="float32",
                        max_model_len=max_model_len, enforce_eager=True)
    # synchronous scheduling (by default): each step's output is processed before the next step is planned
    sched = SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                            max_model_len=max_model_len, is_encoder_decoder=False, async_scheduling=async_scheduling,
                            **scheduler_config)
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=enable_prefix_caching)
    cache.num_gpu_blocks = num_blocks
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                        device_config=DeviceConfig("cpu"))
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=32, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layers.0"], spec)])
    cls = vsched.Scheduler
    if async_scheduling:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler as cls
    real_budget = vsched.MultiModalBudget
    vsched.MultiModalBudget = _budget_class(max_item_tokens, encoder_budget)
    try:
        return cls(config, kv, StructuredOutputManager(config), block_size=block_size)
    finally:
        vsched.MultiModalBudget = real_budget


def vllm_requests(count: int, prompt_len: int, spans=(), *, max_tokens: int, prefix: str = "r") -> list:
    """Real vLLM ``Request`` objects, ids ``<prefix><index>``: ``prompt_len`` tokens, an image at each
    ``(offset, length, is_embed)`` of ``spans`` (as a ``MultiModalFeatureSpec`` with its
    ``PlaceholderRange``), ``max_tokens`` output tokens with ``ignore_eos``."""
    import torch
    from vllm import SamplingParams
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
    from vllm.v1.request import Request

    masks = [torch.tensor(is_embed, dtype=torch.bool) for _, _, is_embed in spans]
    return [Request(request_id=f"{prefix}{r}", prompt_token_ids=[0] * prompt_len,
                    sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True), pooling_params=None,
                    mm_features=[MultiModalFeatureSpec(data=None, modality="image", identifier=f"{prefix}{r}-img{k}",
                                                       mm_position=PlaceholderRange(offset, length, mask))
                                 for k, ((offset, length, _), mask) in enumerate(zip(spans, masks))] or None)
            for r in range(count)]


def make_requests(num_requests: int, images: int, *, with_images: bool = True, max_tokens: int = 100_000,
                  prefix: str = "r") -> list:
    """Real vLLM ``Request``s: per request ``images`` Gemma-style placeholders (ends not
    embedded) separated by text, or (``with_images=False``) the same prompt length as text."""
    is_embed = (False,) + (True,) * (PLACEHOLDER_LEN - 2) + (False,)
    spans = [(TEXT_BETWEEN + k * (PLACEHOLDER_LEN + TEXT_BETWEEN), PLACEHOLDER_LEN, is_embed) for k in range(images)]
    return vllm_requests(num_requests, TEXT_BETWEEN + images * (PLACEHOLDER_LEN + TEXT_BETWEEN),
                         spans if with_images else (), max_tokens=max_tokens, prefix=prefix)


class SchedulerRun:
    """One real scheduler and its requests, stepped with a stand-in model runner (token 0 each step)."""

    def __init__(self, scheduler, requests) -> None:
        self.s = scheduler
        for req in requests:
            scheduler.add_request(req)
        self.requests = {r.request_id: r for r in requests}

    def step(self, clock=clock_ns) -> tuple[int, int, object]:
        """One step: ``(schedule_ns, update_ns, scheduler_output)``."""
        from vllm.v1.outputs import ModelRunnerOutput

        t0 = clock()
        out = self.s.schedule()
        t1 = clock()
        ids = list(out.num_scheduled_tokens)
        done = [rid for rid in ids
                if self.requests[rid].num_computed_tokens >= self.requests[rid].num_prompt_tokens]
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
                                sampled_token_ids=[[0] if rid in done else [] for rid in ids])
        t2 = clock()
        self.s.update_from_output(out, mro)
        t3 = clock()
        return t1 - t0, t3 - t2, out

    def in_decode(self) -> bool:
        """Every request has its prompt in the KV cache and produced a token."""
        return all(r.num_output_tokens > 0 for r in self.requests.values())

    def run_to_decode(self, max_steps: int = 100_000) -> int:
        """Step until every request decodes; returns the steps taken."""
        for n in range(max_steps):
            if self.in_decode():
                return n
            self.step()
        raise RuntimeError("requests did not reach decode")


def _sizes(num_requests: int, images: int, decode_steps: int, budget: int = 8192) -> tuple[int, int, int]:
    """(prompt tokens, KV blocks, max model length) so that no request is ever preempted or
    stopped: early requests decode while later ones prefill (about one step per ``budget``
    tokens of prompt, plus one per request), then ``decode_steps`` more."""
    prompt = TEXT_BETWEEN + images * (PLACEHOLDER_LEN + TEXT_BETWEEN)
    max_len = prompt + num_requests * prompt // budget + 2 * num_requests + decode_steps + 64
    return prompt, num_requests * -(-max_len // 16) + 64, max(max_len, 8192)


def _quantiles(values: list[int]) -> dict:
    v = sorted(values)
    return {"median_ns": nearest_rank(v, 0.5), "p20_ns": nearest_rank(v, 0.2), "p80_ns": nearest_rank(v, 0.8)}


def measure_point(model_dir, num_requests: int, images: int, *, steps: int = 30, warmup: int = 3) -> list[dict]:
    """Per variant, ``schedule()`` and ``update_from_output()`` per decode step at one grid point.

    The three schedulers are brought to steady decode first; timed steps then alternate
    between the variants (the patch is applied around the ``early_return`` steps only).
    Rows: ``variant``, ``num_requests``, ``images``, ``phase`` (``schedule`` or ``update``)
    and quantiles in ns; ``schedule`` rows also carry ``overhead_vs_text_ns``.
    """
    import gc

    prompt, blocks, max_len = _sizes(num_requests, images, warmup + steps)
    runs = {v: SchedulerRun(make_scheduler(model_dir, num_blocks=blocks, max_model_len=max_len),
                            make_requests(num_requests, images, with_images=v != "text", prefix=f"{v}-"))
            for v in VARIANTS}
    for run in runs.values():
        run.run_to_decode()
    times = {v: {"schedule": [], "update": []} for v in VARIANTS}
    gc.collect()
    gc.disable()
    try:
        for i in range(warmup + steps):
            for v, run in runs.items():
                with early_return_patch() if v == "early_return" else contextlib.nullcontext():
                    sched_ns, update_ns, out = run.step()
                if len(out.num_scheduled_tokens) != num_requests or out.scheduled_encoder_inputs:
                    raise RuntimeError(f"{v}: step {i} is not a steady decode step of all {num_requests} requests")
                if i >= warmup:
                    times[v]["schedule"].append(sched_ns)
                    times[v]["update"].append(update_ns)
    finally:
        gc.enable()
    rows = []
    text = _quantiles(times["text"]["schedule"])["median_ns"]
    for v in VARIANTS:
        for phase in ("schedule", "update"):
            row = {"variant": v, "num_requests": num_requests, "images": images, "phase": phase,
                   **_quantiles(times[v][phase]), "steps": steps}
            if phase == "schedule":
                row["overhead_vs_text_ns"] = row["median_ns"] - text
            rows.append(row)
    return rows


def profile_step(model_dir, num_requests: int = 128, images: int = 32, top: int = 12) -> list[dict]:
    """cProfile of one installed ``schedule()`` decode step: the ``top`` functions by own time."""
    import cProfile
    import pstats

    _prompt, blocks, max_len = _sizes(num_requests, images, 2)
    run = SchedulerRun(make_scheduler(model_dir, num_blocks=blocks, max_model_len=max_len),
                       make_requests(num_requests, images, prefix="p-"))
    run.run_to_decode()
    run.step()
    prof = cProfile.Profile()
    prof.enable()
    run.s.schedule()
    prof.disable()
    rows = [{"function": f"{os.path.basename(file)}:{line}({fn})", "ncalls": ncalls, "tottime_us": tottime * 1e6,
             "cumtime_us": cumtime * 1e6}
            for (file, line, fn), (_cc, ncalls, tottime, cumtime, _callers) in pstats.Stats(prof).stats.items()]
    return sorted(rows, key=lambda r: -r["tottime_us"])[:top]


def temporary_model_dir() -> tempfile.TemporaryDirectory:
    """A temporary folder holding the generated model config (use as a context manager)."""
    tmp = tempfile.TemporaryDirectory(prefix="labkit-vllm-sched-")
    write_model_config(tmp.name)
    return tmp
