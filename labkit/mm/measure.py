"""Host-time measurements of the scheduler half: placeholder calls, decode steps, whole workloads.

The #40143 code path is ``variant="list", strategy="loop"``; before it, ``"tensor"`` + ``"loop"``.
"""

from __future__ import annotations

import gc
import statistics

from labkit.bench import add_ratios
from labkit.errors import choice
from labkit.mm.encoder_cache import EncoderCacheManager
from labkit.mm.placeholder import PLACEHOLDER_VARIANTS, get_placeholder_class
from labkit.mm.scheduler import SCHEDULING_STRATEGIES, make_strategy
from labkit.mm.step_scheduler import SchedulerConfig, StepScheduler
from labkit.mm.workload import WorkloadSpec, make_requests, placeholder_layout
from labkit.timing import Timing, auto_number, clock_ns, frozen_gc_heap, progress, summarize, time_host

__all__ = ["BEFORE", "AFTER", "DEFAULT_COMBOS", "measure_placeholder_calls", "make_decode_requests", "make_decode_step",
           "measure_decode_step_host_time", "measure_decode_grid", "sweep_decode_steps", "measure_workload"]

#: (variant, strategy) before #40143 and with #40143
BEFORE = ("tensor", "loop")
AFTER = ("list", "loop")
#: the combinations benchmarks compare by default
DEFAULT_COMBOS: tuple[tuple[str, str], ...] = (
    ("tensor", "loop"), ("list", "loop"), ("fast", "loop"),
    ("list", "window"), ("list", "cursor"), ("fast", "cursor"),
)


def _timing_row(t: Timing) -> dict:
    return {k: v for k, v in t.as_row().items() if k != "method"}


def _check_combos(combos) -> list[tuple[str, str]]:
    out = []
    for v, s in combos:
        get_placeholder_class(v)
        choice(SCHEDULING_STRATEGIES, s, "scheduling strategy", ValueError)
        out.append((v, s))
    return out


def measure_placeholder_calls(variants=None, *, model: str = "gemma", tokens_per_image: int = 256,
                              repeats: int = 20) -> list[dict]:
    """Per-call host cost (ns) of each placeholder method, one row per variant x method.

    The range is one image placeholder of ``model`` with ``tokens_per_image`` soft tokens;
    ``get_embeds_indices_in_range`` asks for its first half. Rows carry
    ``speedup_vs_tensor`` and ``speedup_vs_list`` (ratios of medians within this run).
    """
    variants = list(variants or PLACEHOLDER_VARIANTS)
    length, mask = placeholder_layout(model, tokens_per_image)
    rows = []
    for variant in variants:
        pr = get_placeholder_class(variant)(100, length, mask)
        pr.get_num_embeds()  # fill caches: the steady state is what the scheduler pays
        calls = {
            "get_num_embeds": pr.get_num_embeds,
            "get_embeds_indices_in_range": lambda pr=pr: pr.get_embeds_indices_in_range(1, length // 2),
            "extract_embeds_range": pr.extract_embeds_range,
        }
        for method, fn in calls.items():
            t = time_host(fn, warmup=2, repeats=repeats, number=auto_number(fn))
            rows.append({"variant": variant, "method": method, "model": model,
                         "tokens_per_image": tokens_per_image, **_timing_row(t)})
    for base in ("tensor", "list"):
        add_ratios(rows, base, f"speedup_vs_{base}", over=("method",))
    return rows


def make_decode_requests(num_requests: int, images_per_request: int, *, tokens_per_image: int = 256,
                         model: str = "gemma", variant: str = "list", decoded_tokens: int = 5) -> list:
    """Requests in steady decode: whole prompt (with every image) in the KV cache, a few tokens sampled."""
    spec = WorkloadSpec(num_requests, images_per_request, tokens_per_image=tokens_per_image, model=model,
                        output_len=decoded_tokens + 100, name="decode")
    reqs = make_requests(spec, variant)
    for r in reqs:
        r.num_output_tokens = decoded_tokens + 1
        r.num_computed_tokens = r.prompt_len + decoded_tokens  # one sampled token not yet in KV
    return reqs


def make_decode_step(requests, strategy: str = "loop", *, encoder_budget: int = 8192):
    """A callable doing one decode step's encoder scheduling for ``requests`` (1 new token each, repeatable)."""
    strat = make_strategy(strategy)
    cache = EncoderCacheManager(encoder_budget)

    def step() -> None:
        budget = encoder_budget
        for r in requests:
            _, _, budget = strat.schedule(r, r.num_computed_tokens, 1, budget, cache, 0, False)

    return step


def measure_decode_step_host_time(num_requests: int = 128, images_per_request: int = 32, *,
                                  tokens_per_image: int = 256, model: str = "gemma", variant: str = "list",
                                  strategy: str = "loop", warmup: int = 2, repeats: int = 15) -> Timing:
    """Host time (ns, quantiles) of encoder scheduling in one steady decode step of the given shape."""
    reqs = make_decode_requests(num_requests, images_per_request, tokens_per_image=tokens_per_image,
                                model=model, variant=variant)
    return time_host(make_decode_step(reqs, strategy), warmup=warmup, repeats=repeats)


def _interleaved(fns: list, *, rounds: int, per_round: int, warmup: int, setups=None, desc: str = "") -> list[Timing]:
    """Time several callables round-robin (so load on a shared machine hits all alike).

    Each round takes ``per_round`` samples of each callable; the result per callable
    summarizes the per-round medians (``repeats`` = rounds).
    """
    setups = setups or [None] * len(fns)
    medians: list[list[float]] = [[] for _ in fns]
    for fn, setup in zip(fns, setups):
        for _ in range(warmup):
            if setup is not None:
                setup()
            fn()
    for _ in progress(range(rounds), total=rounds, desc=desc) if desc else range(rounds):
        for k, (fn, setup) in enumerate(zip(fns, setups)):
            medians[k].append(time_host(fn, warmup=0, repeats=per_round, setup=setup).median_ns)
    return [summarize(m) for m in medians]


def measure_decode_grid(num_requests: int = 128, images_per_request: int = 32, *, combos=DEFAULT_COMBOS,
                        tokens_per_image: int = 256, model: str = "gemma", repeats: int = 15,
                        warmup: int = 2) -> list[dict]:
    """One row per (variant, strategy): decode-step host time of one shape.

    Combos are timed round-robin (``repeats`` rounds of 3 samples; quantiles over the
    round medians). Ratios: ``speedup_vs_before`` (vs tensor+loop) and ``speedup_vs_pr``
    (vs list+loop, the #40143 code path); ``per_request_ns`` and ``per_image_ns``.
    """
    combos = _check_combos(combos)
    by_variant = {v: make_decode_requests(num_requests, images_per_request, tokens_per_image=tokens_per_image,
                                          model=model, variant=v) for v in dict.fromkeys(v for v, _ in combos)}
    fns = [make_decode_step(by_variant[variant], strategy) for variant, strategy in combos]
    timings = _interleaved(fns, rounds=max(1, repeats), per_round=3, warmup=warmup)
    rows = [{"variant": variant, "strategy": strategy, "combo": f"{variant}+{strategy}",
             "num_requests": num_requests, "images_per_request": images_per_request,
             "tokens_per_image": tokens_per_image, "model": model, **_timing_row(t),
             "per_request_ns": t.median_ns / num_requests,
             "per_image_ns": t.median_ns / max(1, num_requests * images_per_request)}
            for (variant, strategy), t in zip(combos, timings)]
    _combo_ratios(rows, over=("num_requests", "images_per_request"))
    return rows


def sweep_decode_steps(requests_values=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                       images_values=(1, 2, 4, 8, 16, 32, 64), *, fixed_requests: int = 128,
                       fixed_images: int = 32, combos=DEFAULT_COMBOS, tokens_per_image: int = 256,
                       model: str = "gemma", repeats: int = 7) -> list[dict]:
    """Two one-dimensional sweeps of decode-step host time: requests at ``fixed_images`` images each
    (``sweep="requests"``), then images per request at ``fixed_requests`` requests (``sweep="images"``)."""
    points = [("requests", n, fixed_images) for n in requests_values]
    points += [("images", fixed_requests, m) for m in images_values]
    return [{"sweep": sweep, **row} for sweep, n, m in progress(points, total=len(points), desc="mm sweep")
            for row in measure_decode_grid(n, m, combos=combos, tokens_per_image=tokens_per_image, model=model,
                                           repeats=repeats, warmup=1)]


def measure_workload(spec: WorkloadSpec, *, combos=DEFAULT_COMBOS, config: SchedulerConfig | None = None,
                     repeats: int = 3) -> list[dict]:
    """Host time of the whole step scheduler over ``spec``, per (variant, strategy), round-robin with GC paused."""
    combos = _check_combos(combos)
    config = config or SchedulerConfig()
    states = [{} for _ in combos]
    setups, runs = [], []
    for (variant, strategy), state in zip(combos, states):
        def setup(variant=variant, strategy=strategy, state=state):
            state.pop("s", None)
            sched = StepScheduler(config, strategy)
            sched.add_requests(make_requests(spec, variant))
            state["s"] = sched
            gc.collect()  # start each timed run with no garbage pending

        setups.append(setup)
        runs.append(lambda state=state: _run_without_gc(state["s"]))
    # what exists now lives through every round: each setup's collection walks only what the rounds create
    with frozen_gc_heap():
        timings = _interleaved(runs, rounds=max(1, repeats), per_round=1, warmup=0, setups=setups,
                               desc="mm workload")
    rows = []
    reference = None
    for (variant, strategy), setup, state, t in zip(combos, setups, states, timings):
        setup()
        sched = state["s"]
        decode_ns, prefill_ns = [], []
        clock = clock_ns
        while sched.has_unfinished():
            t0 = clock()
            plan = sched.schedule()
            dt = clock() - t0
            (prefill_ns if plan.num_prefill else decode_ns).append(dt)
        log = sched.log
        if reference is None:
            reference = log
        rows.append({"variant": variant, "strategy": strategy, "combo": f"{variant}+{strategy}",
                     "workload": spec.name, "num_requests": spec.num_requests,
                     "steps": len(log), **_timing_row(t), "per_step_ns": t.median_ns / max(1, len(log)),
                     "decode_step_median_ns": _median(decode_ns), "prefill_step_median_ns": _median(prefill_ns),
                     "decode_steps": len(decode_ns), "prefill_steps": len(prefill_ns),
                     "identical_decisions": log == reference})
    _combo_ratios(rows, over=("workload",))
    return rows


def _combo_ratios(rows: list[dict], *, over: tuple[str, ...]) -> None:
    """``speedup_vs_before`` (over tensor+loop) and ``speedup_vs_pr`` (over list+loop) of each row."""
    for base, name in ((BEFORE, "speedup_vs_before"), (AFTER, "speedup_vs_pr")):
        add_ratios(rows, base, name, over=over, line_arg=("variant", "strategy"))


def _run_without_gc(sched: StepScheduler) -> None:
    # A collection of the previous run's garbage must not land in this one's time
    # (vLLM likewise freezes its long-lived objects out of the collector).
    enabled = gc.isenabled()
    gc.disable()
    try:
        sched.run()
    finally:
        if enabled:
            gc.enable()


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None
