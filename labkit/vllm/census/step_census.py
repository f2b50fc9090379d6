"""The census of vLLM's whole engine step: host time per phase, per variant, at #40143's steady state.

More: docs/reference.md, ``labkit.vllm.census.step_census``.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from labkit.vllm.census.step_checks import ALONE_MODES, OFF_HOST, PHASES, TOP, step_quantiles
from labkit.timing import clock_ns, stopwatch

logger = logging.getLogger(__name__)

__all__ = ["CENSUS_VARIANTS", "CensusPlan", "forward_off_host", "build_census_engine", "measure_point",
           "drop_encoded_inputs", "prompt_tokens", "kv_cache_gib", "trace_vs_wrapper"]

#: the variants of the census, in the order of the first round
CENSUS_VARIANTS = ("baseline", "pr40143", "merged", "early-return")
#: the variants vllm-sched's stand-in scheduler is stepped for beside the engine's scheduler alone
STAND_IN_VARIANTS = ("baseline", "pr40143", "merged")
#: text tokens of the made Gemma 4 prompt around its images (``labkit.vllm.conformance.models.image_prompt``), with margin
PROMPT_TEXT_TOKENS = 16


@dataclass(frozen=True)
class CensusPlan:
    """What :func:`measure_point` runs at each grid point."""

    points: tuple[tuple[int, int], ...]  #: (requests, images per request)
    variants: tuple[str, ...] = CENSUS_VARIANTS
    rounds: int = 4  #: rounds of the variants, each variant once per round
    block: int = 6  #: timed decode steps per variant per round (after one left out)
    profiled: int = 3  #: profiled decode steps per variant (after one left out)
    wave: int = 16  #: requests admitted at a time
    width: int = 96
    height: int = 64
    placeholder_len: int = 262  #: tokens per image (Gemma 4 at this aspect)
    alone_rounds: int = 6  #: rounds of the engine's scheduler driven alone, per mode (0: none)
    alone_block: int = 4  #: its timed steps per variant per round (after one left out)
    off_host: bool = True  #: a block with the forward off the host after each variant's block

    @property
    def decode_steps(self) -> int:
        """Decode steps each request must be able to run once every request decodes (the scheduler
        driven alone advances every request a token a step too)."""
        per_variant = self.rounds * (self.block + 1) * (2 if self.off_host else 1) + self.profiled + 2
        alone = len(ALONE_MODES) * self.alone_rounds * (self.alone_block + 1)
        return len(self.variants) * (per_variant + alone) + 8

    def max_tokens(self, requests: int) -> int:
        """Output tokens per request: the census's decode steps plus those run while later waves prefill."""
        waves = -(-requests // self.wave)
        return self.decode_steps + waves * 24 + 64


def prompt_tokens(plan: CensusPlan, images: int) -> int:
    """Prompt tokens of a request with ``images`` images (an upper bound: text tokens with margin)."""
    return images * plan.placeholder_len + PROMPT_TEXT_TOKENS


def kv_cache_gib(plan: CensusPlan) -> int:
    """GiB of KV cache for the largest point: the made Gemma 4 keeps 2 KV heads of 32 in bf16 on 2
    layers (512 bytes per token), doubled for the block rounding and the sliding layer's spare."""
    need = max(n * (prompt_tokens(plan, m) + plan.max_tokens(n)) for n, m in plan.points) * 512 * 2
    return max(1, -(-need // 2**30))


def build_census_engine(model_dir, run_dir, plan: CensusPlan, *, profile_dir):
    """One engine sized for every point of ``plan`` (requests, images, prompt and output lengths)."""
    from labkit.vllm.conformance.engine import build_engine

    max_n = max(n for n, _ in plan.points)
    max_m = max(m for _, m in plan.points)
    max_len = prompt_tokens(plan, max_m) + plan.max_tokens(max_n) + 16
    return build_engine(model_dir, run_dir, images_per_prompt=max_m, profile_dir=profile_dir,
                        kv_cache_gib=kv_cache_gib(plan), max_num_seqs=max_n, max_model_len=max_len,
                        max_num_batched_tokens=8192)


def drop_encoded_inputs(scheduler) -> int:
    """Drop the processed pixels of every running request whose prompt is computed; returns how many items."""
    n = 0
    for req in scheduler.running:
        if req.num_computed_tokens < req.num_prompt_tokens:
            continue
        for feat in req.mm_features or ():
            if feat.data is not None:
                feat.data = None
                n += 1
    return n


@contextlib.contextmanager
def forward_off_host(runner, token: int):
    """Inside the block, the model runner's forward, the model's logits and the sampler do no work.

    ``runner`` is vLLM's model runner (``_model_forward``, ``model.compute_logits``, ``sampler``):
    the forward returns rows of one zero buffer made here (``max_num_batched_tokens`` x the
    hidden size), the logits a zero column per sampled row, the sampler ``token`` for every
    request (a token the model sampled before; the census's requests ignore EOS), all views of
    buffers made once, so nothing runs that touches the KV cache, the weights or a
    vocabulary-sized array. Everything else of the step (scheduling, the runner's input
    preparation and bookkeeping, ``update_from_output``, output processing and detokenization)
    runs as vLLM runs it. The KV cache is not written in the block: the steps after it read
    stale entries for those positions, which changes no host cost. Only greedy requests without
    logprobs (``RuntimeError`` otherwise)."""
    import torch
    from vllm.v1.outputs import SamplerOutput

    from labkit.vllm.ab import restore_attrs

    model = runner.model
    hidden = torch.zeros(runner.scheduler_config.max_num_batched_tokens, runner.model_config.get_hidden_size(),
                         dtype=runner.model_config.dtype)
    rows = runner.scheduler_config.max_num_seqs
    logits = torch.zeros(rows, 1, dtype=torch.float32)
    tokens = torch.full((rows, 1), int(token), dtype=torch.int32)

    def model_forward(*args, positions=None, **kwargs):
        return hidden[:positions.shape[-1]]

    def compute_logits(states):
        return logits[:states.shape[0]]

    def sampler(logits=None, sampling_metadata=None, **kwargs):
        if sampling_metadata is not None and (not sampling_metadata.all_greedy
                                              or sampling_metadata.max_num_logprobs is not None):
            raise RuntimeError("forward_off_host: only greedy requests without logprobs")
        return SamplerOutput(sampled_token_ids=tokens[:logits.shape[0]], logprobs_tensors=None)

    saved = [(obj, name, name in vars(obj), vars(obj).get(name)) for obj, name in
             ((runner, "_model_forward"), (model, "compute_logits"), (runner, "sampler"))]
    runner._model_forward, model.compute_logits, runner.sampler = model_forward, compute_logits, sampler
    try:
        yield
    finally:
        restore_attrs(saved)


@dataclass
class _PointRun:
    llm: object
    scheduler: object
    requests: int
    images: int
    ids: list = field(default_factory=list)


def _admit(run: _PointRun, model_dir, plan: CensusPlan, seed: int) -> dict:
    """Add the point's requests wave by wave; step until all decode. Returns timings of the set-up."""
    from vllm import SamplingParams

    from labkit.vllm.conformance.engine import Shape, make_requests

    shape = Shape(run.requests, run.images, plan.width, plan.height, output_len=plan.max_tokens(run.requests))
    params = SamplingParams(temperature=0.0, max_tokens=shape.output_len, ignore_eos=True)
    engine = run.llm.llm_engine
    t0 = clock_ns()
    add_s = 0.0
    steps = 0
    for start in range(0, run.requests, plan.wave):
        wave = make_requests(model_dir, Shape(min(plan.wave, run.requests - start), run.images, plan.width,
                                              plan.height, shape.output_len), seed=seed + start)
        with stopwatch() as adding:
            for i, prompt in enumerate(wave):
                rid = f"p{run.requests}x{run.images}-r{start + i}"
                engine.add_request(rid, prompt, params)
                run.ids.append(rid)
        add_s += adding.s
        admitted = start + len(wave)
        while not (len(run.scheduler.running) == admitted and not run.scheduler.waiting
                   and all(r.num_output_tokens > 0 for r in run.scheduler.running)):
            engine.step()
            steps += 1
            drop_encoded_inputs(run.scheduler)
            if steps > 100_000:
                raise RuntimeError("requests did not reach decode")
        drop_encoded_inputs(run.scheduler)
        logger.info("%d x %d: %d of %d requests decoding after %.0f s (%d steps)", run.requests, run.images,
                    admitted, run.requests, (clock_ns() - t0) / 1e9, steps)
    return {"admit_s": add_s, "to_decode_s": (clock_ns() - t0) / 1e9 - add_s, "prefill_steps": steps}


def _block(run: _PointRun, variant: str, steps: int, *, profile: Callable | None = None) -> list:
    """``steps`` timed decode steps of ``variant`` after one left out; returns their StepRecords."""
    from labkit.vllm.ab import patched_vllm
    from labkit.vllm.census.step_timers import PhaseTimers

    engine = run.llm.llm_engine
    with patched_vllm(variant):
        engine.step()  # left out: the first step after a switch rebuilds the cumsums it cleared
        with (profile() if profile is not None else contextlib.nullcontext()):
            with PhaseTimers(run.llm) as timers:
                for _ in range(steps):
                    engine.step()
    for i, rec in enumerate(timers.steps):
        if not (rec.decode_only and rec.requests == run.requests):
            raise RuntimeError(f"{variant}: step {i} of a block is not a decode step of all {run.requests} "
                               f"requests ({rec.requests} requests, {rec.tokens} tokens)")
    return timers.steps


def _derived(phases_ns: dict) -> dict:
    """Wrapper ns per phase -> us per phase with the top-level ones (same rules as the trace table)."""
    us = {k: v / 1e3 for k, v in phases_ns.items()}
    g = us.get
    forward = g("model_forward", 0.0) + g("logits", 0.0)
    out = dict(us, forward=forward, prepare_inputs=g("input_prep", 0.0) - g("encoder", 0.0))
    out.setdefault("encoder", 0.0)
    out["other"] = g("step", 0.0) - sum(out.get(p, 0.0) for p in TOP)
    return out


@contextlib.contextmanager
def _profiled(llm, profile_dir: Path, dest: Path, prefix: str, found: list):
    """vLLM's torch profiler around the block; the trace it writes is moved to ``dest`` (appended to ``found``)."""
    from labkit.vllm.conformance.engine import move_new_traces

    before = set(profile_dir.rglob("*")) if profile_dir.exists() else set()
    llm.start_profile(profile_prefix=prefix)
    try:
        yield
    finally:
        with contextlib.redirect_stdout(io.StringIO()):  # vLLM prints the profiler's op table on stop
            llm.stop_profile()
    found += move_new_traces(profile_dir, before, dest)


def measure_point(llm, model_dir, requests: int, images: int, plan: CensusPlan, *, profile_dir, trace_dir,
                  seed: int = 0) -> tuple[list[dict], dict]:
    """Rows of one grid point (see the module text) and the point's set-up facts (times, traces)."""
    from labkit.trace.analysis.host.engine_steps import engine_phase_table
    from labkit.trace.read.load import load_trace
    from labkit.vllm.census.step_timers import engine_parts
    from labkit.vllm.conformance.engine import engine_scheduler

    run = _PointRun(llm, engine_scheduler(llm), requests, images)
    facts = _admit(run, model_dir, plan, seed)
    # The collector stays on, as in a server: vLLM freezes only its start-up heap, so the live
    # requests (and the young 0-d tensors of the pre-#40143 reads) are walked as there.
    gc.collect()
    timed: dict[str, list] = {v: [] for v in plan.variants}
    off_host: dict[str, list] = {v: [] for v in plan.variants}
    profiled: dict[str, list] = {}
    traces: dict[str, str] = {}
    runner = engine_parts(llm)["runner"] if plan.off_host else None
    try:
        for r in range(plan.rounds):
            order = plan.variants[r % len(plan.variants):] + plan.variants[:r % len(plan.variants)]
            for v in order:
                timed[v] += _block(run, v, plan.block)
                if plan.off_host:
                    with forward_off_host(runner, run.scheduler.running[0].output_token_ids[-1]):
                        off_host[v] += _block(run, v, plan.block)
        for v in plan.variants:
            found: list = []
            tag = f"{v}-{requests}x{images}"
            profiled[v] = _block(run, v, plan.profiled, profile=lambda: _profiled(
                llm, Path(profile_dir), Path(trace_dir) / tag, tag, found))
            if not found:
                raise RuntimeError(f"vLLM's profiler wrote no trace for {tag}")
            traces[v] = str(found[0])
        # last: it advances the requests behind the model runner's back (the point ends with them)
        alone = _alone_rows(run, plan) if plan.alone_rounds else []
    finally:
        llm.llm_engine.abort_request(run.ids)
        while llm.llm_engine.has_unfinished_requests():
            llm.llm_engine.step()
    rows = []
    for v in plan.variants:
        wrapper = [_derived(rec.phases_ns) for rec in timed[v]]
        wrapper_prof = [_derived(rec.phases_ns) for rec in profiled[v]]
        table = engine_phase_table(load_trace(traces[v]))
        if len(table) == 0:
            raise RuntimeError(f"no engine step frames in the trace {traces[v]}")
        rows += _variant_rows(v, requests, images, wrapper, wrapper_prof, table, traces[v])
        if off_host[v]:
            rows += _off_host_rows(v, requests, images, [_derived(rec.phases_ns) for rec in off_host[v]])
    facts["traces"] = traces
    return rows + alone, facts


def _alone_rows(run: _PointRun, plan: CensusPlan) -> list[dict]:
    """The engine's scheduler driven alone at the point, vllm-sched's stand-in stepped in the same rounds."""
    from labkit.vllm.census.step_checks import engine_scheduler_alone, stand_in_scheduler, sweep_bytes

    pair = tuple(v for v in plan.variants if v in STAND_IN_VARIANTS)
    steps = plan.alone_rounds * (plan.alone_block + 1) + 2
    with (stand_in_scheduler(run.requests, run.images, pair, steps) if {"baseline", "merged"} <= set(pair)
          else contextlib.nullcontext()) as stand_in:
        gc.collect()
        return engine_scheduler_alone(run.scheduler, run.requests, run.images, plan.variants,
                                      rounds=plan.alone_rounds, block=plan.alone_block, sweep=sweep_bytes(),
                                      stand_in=stand_in)


def _named(wrapper) -> dict:
    """``phase_sum_us``, ``named_share``, ``named_share_max`` and ``named_phases`` from the wrapper timers."""
    sums = [sum(w.get(p, 0.0) for p in TOP) for w in wrapper]
    shares = [s / w["step"] for s, w in zip(sums, wrapper) if w["step"]]
    return {"phase_sum_us": float(statistics.median(sums)), "named_share": float(statistics.median(shares)),
            "named_share_max": float(max(shares)), "named_phases": list(TOP)}


def _off_host_rows(variant, requests, images, wrapper) -> list[dict]:
    """Rows of the steps with the forward off the host: ``off_host:<phase>`` per top-level phase and the step."""
    rows = []
    for phase in ("step",) + TOP + ("other",):
        row = {"variant": variant, "num_requests": requests, "images": images, "phase": OFF_HOST + phase,
               "parent": None, "steps": len(wrapper), "timer": "wrapper (unprofiled steps), forward off the host",
               **step_quantiles([w.get(phase, 0.0) for w in wrapper])}
        if phase == "step":
            row.update(_named(wrapper))
        rows.append(row)
    return rows


def trace_vs_wrapper(trace_us, wrapper_us) -> float | None:
    """The trace's time of a phase over the wrapper timers' time of the same profiled steps: the median
    of the ratios step for step (one trace step per timed step, in order), so that a stall of the
    process between a wrapper and the frame it times, in one or two steps of a busy machine, moves
    no more than those steps; ``None`` where the step counts differ or no step timed the phase."""
    if len(trace_us) != len(wrapper_us):
        return None
    ratios = [t / w for t, w in zip(trace_us, wrapper_us) if w > 0]
    return float(statistics.median(ratios)) if ratios else None


def _variant_rows(variant, requests, images, wrapper, wrapper_prof, table, trace) -> list[dict]:
    rows = []
    for phase, parent in PHASES:
        row = {"variant": variant, "num_requests": requests, "images": images, "phase": phase, "parent": parent,
               "steps": len(wrapper), "timer": "wrapper (unprofiled steps)"}
        if phase == "get_num_embeds":  # not wrapped: thousands of calls a step
            row.update(median_us=None, p20_us=None, p80_us=None, timer="trace only")
        else:
            row.update(step_quantiles([w.get(phase, 0.0) for w in wrapper]))
        col = "dur_us" if phase == "step" else f"{phase}_us"
        row["trace_median_us"] = float(table[col].median())
        row["trace_mean_us"] = float(table[col].mean())
        row["trace_steps"] = int(len(table))
        if phase != "get_num_embeds":
            prof = [w.get(phase, 0.0) for w in wrapper_prof]
            row["wrapper_profiled_median_us"] = statistics.median(prof)
            row["wrapper_profiled_mean_us"] = statistics.fmean(prof)
            row["trace_vs_wrapper"] = trace_vs_wrapper(table[col].tolist(), prof)
            row["profiler_inflation"] = (row["wrapper_profiled_median_us"] / row["median_us"]
                                         if row["median_us"] else None)
        if phase == "step":
            row.update(_named(wrapper))
            row["trace_named_share"] = float(table["named_share"].median())
            row["trace_named_share_max"] = float(table["named_share"].max())
            row["trace"] = Path(trace).name
        rows.append(row)
    return rows
