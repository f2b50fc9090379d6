"""vLLM's real V1 engine in this process, with the lab's A/B variants applied: build, drive, count, profile.

More: docs/reference.md, ``labkit.vllm.conformance.engine``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from labkit.errors import UsageError
from labkit.timing import stopwatch

logger = logging.getLogger(__name__)

__all__ = ["ENGINE_ENV", "ENGINE_DEFAULTS", "Shape", "apply_engine_env", "build_engine", "randomize_weights",
           "make_requests", "generate_tokens", "ScheduleCounter", "StepCount", "profile_run", "run_variants",
           "VariantRun", "engine_scheduler", "shutdown_engine", "vllm_build", "shape_dict", "quiet_vllm"]

#: the environment vLLM's CPU build runs with here (see README, "vLLM's real engine on a CPU")
ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine core in this process (one scheduler to wrap)
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # the machine is shared: no core pinning
    "OMP_NUM_THREADS": "1",  # two threads jitter ~10x beside other work on 2 cores
    "HF_HUB_OFFLINE": "1",  # never the hub: models are made locally
    "TOKENIZERS_PARALLELISM": "false",
}

#: ``vllm.LLM`` arguments of the lab's CPU runs (``build_engine`` overrides win)
ENGINE_DEFAULTS = {
    "load_format": "dummy",
    "dtype": "bfloat16",
    "max_model_len": 4096,
    "max_num_seqs": 64,
    "max_num_batched_tokens": 2048,
    "enable_prefix_caching": False,
    "mm_processor_cache_gb": 0,
    "enforce_eager": True,
    "seed": 0,
}


@dataclass(frozen=True)
class Shape:
    """A workload: ``requests`` requests of ``images`` images of ``width x height`` px, ``output_len`` tokens each."""

    requests: int
    images: int
    width: int = 96  # 64 x 96 px (HxW): the aspect of #40143's 1024 x 1536 images
    height: int = 64
    output_len: int = 16

    def check(self) -> "Shape":
        for name in ("requests", "images", "width", "height", "output_len"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        return self


def apply_engine_env(run_dir: str | Path) -> dict[str, str]:
    """Set :data:`ENGINE_ENV` and ``VLLM_CACHE_ROOT`` in ``os.environ`` (before vLLM is imported); returns them."""
    env = dict(ENGINE_ENV, VLLM_CACHE_ROOT=str(Path(run_dir).resolve() / "vllm-cache"))
    os.environ.update(env)
    return env


def build_engine(model_dir: str | Path, run_dir: str | Path, *, images_per_prompt: int,
                 profile_dir: str | Path | None = None, weight_seed: int | None = 1,
                 kv_cache_gib: int | None = None, **overrides):
    """A ``vllm.LLM`` for the made model at ``model_dir``, its caches and traces under ``run_dir``.

    ``images_per_prompt`` sets ``limit_mm_per_prompt``; ``profile_dir`` configures vLLM's torch
    profiler (``profiler_config``; traces are written by :func:`profile_run`); ``weight_seed``
    re-draws the dummy weights (:func:`randomize_weights`; None keeps vLLM's near-zero ones);
    ``kv_cache_gib`` replaces :data:`ENGINE_ENV`'s KV-cache size.
    Other keyword arguments override :data:`ENGINE_DEFAULTS`.
    """
    from labkit.vllm.conformance.models import model_arch

    model_arch(model_dir)  # a made folder, or a one-line error
    apply_engine_env(run_dir)
    if kv_cache_gib is not None:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(kv_cache_gib))
    from vllm import LLM

    kwargs = dict(ENGINE_DEFAULTS, limit_mm_per_prompt={"image": images_per_prompt}, **overrides)
    if profile_dir is not None:
        kwargs["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(Path(profile_dir).resolve()),
                                     "torch_profiler_dump_cuda_time_total": False}
    llm = LLM(model=str(model_dir), **kwargs)
    if weight_seed is not None:
        randomize_weights(llm, weight_seed)
    return llm


def _redraw(model, seed: int, std: float) -> int:
    import torch

    gen = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for _, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if p.dtype.is_floating_point:
                p.copy_((torch.randn(p.shape, generator=gen, dtype=torch.float32) * std).to(p.dtype))
                n += 1
    return n


def randomize_weights(llm, seed: int = 1, std: float = 0.05) -> int:
    """Re-draw every floating-point parameter from N(0, std) with a fixed seed; returns how many."""
    return sum(llm.apply_model(lambda model: _redraw(model, seed, std)))


def make_requests(model_dir: str | Path, shape: Shape, *, seed: int = 0, pixels: str = "solid") -> list[dict]:
    """``shape.requests`` prompts for ``vllm.LLM.generate``, each with ``shape.images`` different images."""
    import numpy as np
    from PIL import Image

    from labkit.vllm.conformance.models import image_prompt, model_arch

    shape.check()
    if pixels not in ("solid", "random"):
        raise UsageError(f"pixels must be 'solid' or 'random', got {pixels!r}")
    arch = model_arch(model_dir)
    rng = np.random.default_rng(seed)
    size = (shape.height, shape.width, 3)
    requests = []
    for _ in range(shape.requests):
        arrays = [np.broadcast_to(rng.integers(0, 256, 3, dtype=np.uint8), size) if pixels == "solid"
                  else rng.integers(0, 256, size, dtype=np.uint8) for _ in range(shape.images)]
        requests.append({"prompt": image_prompt(arch, shape.images),
                         "multi_modal_data": {"image": [Image.fromarray(np.ascontiguousarray(a)) for a in arrays]}})
    return requests


def generate_tokens(llm, requests: Sequence[dict], output_len: int) -> list[list[int]]:
    """Greedy generation of exactly ``output_len`` tokens per request; token ids in request order."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    outputs = llm.generate(list(requests), params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def shutdown_engine(llm) -> None:
    """Stop the in-process engine now (else vLLM stops it at interpreter exit, after logging is closed)."""
    core = getattr(llm.llm_engine, "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()


def engine_scheduler(llm):
    """The engine's ``Scheduler`` (the engine must run in this process)."""
    core = getattr(llm.llm_engine.engine_core, "engine_core", None)
    if core is None:
        raise RuntimeError("the engine core is not in this process: set VLLM_ENABLE_V1_MULTIPROCESSING=0")
    return core.scheduler


@dataclass
class StepCount:
    """One ``schedule()`` call: the scheduler's ``get_num_embeds`` calls and what it scheduled."""

    num_embeds_calls: int
    requests: int
    tokens: int
    decode_only: bool


@dataclass
class ScheduleCounter:
    """Counts ``get_num_embeds`` calls inside each ``Scheduler.schedule()``; enter after a variant is applied.

    It adds a Python call per wrapped call, so never time a run inside it.
    """

    steps: list[StepCount] = field(default_factory=list)
    #: per request added while counting: each image's ``(offset, length, is_embed)`` as the scheduler got it
    placeholders: dict[str, list[tuple[int, int, tuple[bool, ...] | None]]] = field(default_factory=dict)

    def __enter__(self) -> "ScheduleCounter":
        from vllm.multimodal.inputs import PlaceholderRange
        from vllm.v1.core.sched.scheduler import Scheduler

        counter = self
        self._owners = [(PlaceholderRange, "get_num_embeds"), (Scheduler, "schedule"), (Scheduler, "add_request")]
        self._saved = [(o, a, a in vars(o), vars(o).get(a)) for o, a in self._owners]
        inner_embeds = PlaceholderRange.get_num_embeds
        inner_schedule = Scheduler.schedule
        inner_add = Scheduler.add_request
        self._calls = 0
        self._inside = False

        def get_num_embeds(placeholder):
            if counter._inside:
                counter._calls += 1
            return inner_embeds(placeholder)

        def schedule(scheduler, *args, **kwargs):
            counter._calls, counter._inside = 0, True
            try:
                out = inner_schedule(scheduler, *args, **kwargs)
            finally:
                counter._inside = False
            tokens = out.num_scheduled_tokens
            decode = bool(tokens) and not out.scheduled_new_reqs and all(n == 1 for n in tokens.values())
            counter.steps.append(StepCount(counter._calls, len(tokens), out.total_num_scheduled_tokens, decode))
            return out

        def add_request(scheduler, request, *args, **kwargs):
            counter.placeholders[request.request_id] = [
                (f.mm_position.offset, f.mm_position.length,
                 None if f.mm_position.is_embed is None else tuple(bool(x) for x in f.mm_position.is_embed.tolist()))
                for f in (request.mm_features or [])]
            return inner_add(scheduler, request, *args, **kwargs)

        PlaceholderRange.get_num_embeds = get_num_embeds
        Scheduler.schedule = schedule
        Scheduler.add_request = add_request
        return self

    def __exit__(self, *exc) -> None:
        from labkit.vllm.ab import restore_attrs

        restore_attrs(self._saved)

    def decode_steps(self, requests: int | None = None) -> list[StepCount]:
        """The pure decode steps (every scheduled request one token), with ``requests`` running if given."""
        return [s for s in self.steps if s.decode_only and (requests is None or s.requests == requests)]


def profile_run(llm, requests: Sequence[dict], output_len: int, profile_dir: str | Path, dest: str | Path,
                *, prefix: str) -> list[Path]:
    """Run ``requests`` under vLLM's torch profiler; move the traces it writes into ``dest``; returns them.

    The engine must have been built with ``profile_dir`` (:func:`build_engine`). Traces are
    named by vLLM (``<prefix>...pt.trace.json.gz``).
    """
    profile_dir, dest = Path(profile_dir), Path(dest)
    before = set(profile_dir.rglob("*")) if profile_dir.exists() else set()
    llm.start_profile(profile_prefix=prefix)
    try:
        generate_tokens(llm, requests, output_len)
    finally:
        llm.stop_profile()
    moved = move_new_traces(profile_dir, before, dest)
    if not moved:
        raise RuntimeError(f"vLLM's profiler wrote no trace under {profile_dir}")
    return moved


def move_new_traces(profile_dir: Path, before: set, dest: Path) -> list[Path]:
    """Move the traces vLLM's profiler wrote under ``profile_dir`` (every file not in ``before``, what was
    there when it started) into ``dest``; returns their new paths."""
    dest.mkdir(parents=True, exist_ok=True)
    moved = []
    for path in sorted(set(profile_dir.rglob("*")) - before):
        if path.is_file() and path.name.endswith((".pt.trace.json.gz", ".pt.trace.json")):
            moved.append(Path(shutil.move(str(path), dest / path.name)))
    return moved


@dataclass
class VariantRun:
    """What one variant gave on the shared engine."""

    variant: str
    tokens: list[list[int]]
    wall_s: float
    steps: list[StepCount]
    traces: list[str] = field(default_factory=list)
    placeholders: dict = field(default_factory=dict)

    def decode_steps(self) -> list[StepCount]:
        """The pure decode steps (every scheduled request one token)."""
        return [s for s in self.steps if s.decode_only]

    def decode_calls(self, requests: int | None = None) -> list[int]:
        """``get_num_embeds`` calls of each decode step (with ``requests`` running, if given)."""
        return [s.num_embeds_calls for s in self.decode_steps() if requests is None or s.requests == requests]

    def summary(self, requests: int) -> dict:
        decode = self.decode_steps()
        calls = [s.num_embeds_calls for s in decode]
        full = self.decode_calls(requests)
        return {"variant": self.variant, "wall_s": self.wall_s, "steps": len(self.steps),
                "decode_steps": len(decode), "full_decode_steps": len(full),
                "min_full_decode_calls": min(full) if full else None,
                "min_decode_calls": min(calls) if calls else None, "max_decode_calls": max(calls) if calls else None,
                "min_calls_per_running_request": min(s.num_embeds_calls / s.requests for s in decode) if decode else None,
                "traces": self.traces}


def run_variants(llm, requests: Sequence[dict], shape: Shape, variants: Sequence[str], *,
                 profile: tuple[Path, Path] | None = None, profile_requests: Sequence[dict] | None = None,
                 ) -> Iterator[VariantRun]:
    """For each variant, on the live engine: a timed run, a counted run and optionally a profiled run.

    Yields :class:`VariantRun` (tokens of the timed run; steps of the counted run, whose tokens
    must equal them, else ``RuntimeError``). ``profile=(profile_dir, dest)`` also writes one
    trace per variant under ``dest/<variant>/`` from ``profile_requests`` (default: ``requests``).
    """
    from labkit.vllm.ab import patched_vllm

    for name in variants:
        with patched_vllm(name):
            with stopwatch() as sw:
                tokens = generate_tokens(llm, requests, shape.output_len)
            wall = sw.s
            with ScheduleCounter() as counter:
                counted = generate_tokens(llm, requests, shape.output_len)
            if counted != tokens:
                raise RuntimeError(f"variant {name}: the counted run's tokens differ from the timed run's")
            run = VariantRun(name, tokens, wall, counter.steps, placeholders=counter.placeholders)
            if profile is not None:
                pdir, dest = profile
                traces = profile_run(llm, profile_requests or requests, shape.output_len, pdir,
                                     Path(dest) / name, prefix=name)
                run.traces = [str(t) for t in traces]
        logger.info("variant %s: %.2f s, %d steps", name, wall, len(counter.steps))
        yield run


def vllm_build() -> dict:
    """The installed vLLM: ``version``, ``distribution`` (``vllm-cpu`` for the CPU build) and ``platform``."""
    import importlib.metadata as md

    import vllm
    from vllm.platforms import current_platform

    dists = md.packages_distributions().get("vllm") or []
    return {"version": vllm.__version__, "distribution": dists[0] if dists else None,
            "platform": type(current_platform).__name__}


def shape_dict(shape: Shape) -> dict:
    """The shape as a plain dict (results and JSON outputs)."""
    return asdict(shape)


@contextlib.contextmanager
def quiet_vllm(level: int = logging.WARNING) -> Iterator[None]:
    """vLLM's own loggers at ``level`` inside the block (its INFO lines are many)."""
    lg = logging.getLogger("vllm")
    old = lg.level
    lg.setLevel(level)
    try:
        yield
    finally:
        lg.setLevel(old)
