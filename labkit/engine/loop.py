"""The engine step loop: schedule -> prepare metadata -> forward -> sample, as vLLM's engine runs it.

More: docs/reference.md, ``labkit.engine.loop``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from labkit.engine.config import NO_PREFIX, EngineConfig, get_model_config
from labkit.engine.graphs import effective_mode
from labkit.engine.model import ForwardBatch, TransformerStack, make_batch
from labkit.errors import UsageError, choice
from labkit.step_model import planned_ahead
from labkit.timing import frozen_gc_heap, summarize  # noqa: F401  (frozen_gc_heap: public here too)


@dataclass(frozen=True)
class EngineStep:
    """One engine step: host phase times and when its tokens reached the host (all ns).

    ``start_ns``: host time the step's scheduling began; ``output_ns``: host time its sampled
    tokens were available (after the event wait, the time TPOT is measured at); ``*_ns`` phases
    are host durations.
    """

    step: int
    num_seqs: int
    num_tokens: int
    num_prefill: int
    start_ns: int
    schedule_ns: int
    prepare_ns: int
    forward_ns: int
    sample_ns: int
    wait_ns: int
    output_ns: int
    h2d_count: int
    graph_mode: str = "eager"
    replays: int = 0


class Engine:
    """A mini engine over ``device`` (``SimDevice`` or ``TorchDevice``) for ``config``.

    ``model`` may be given (e.g. a prebuilt real stack reused across variants); otherwise a
    weightless stack (simulated device) or a random-weight one (real device) is built.
    ``host_costs`` (a ``labkit.engine.device.hostcost.FixedHostCosts``, simulated device only) charges
    fixed host times per phase instead of measuring Python time: use it with a frozen clock.
    ``graph_mode`` is the CUDA-graph mode actually run and ``graph_note`` says why it differs
    from the configured one (None when it does not). ``graph_runner``: a runner with graphs
    already captured for the same model, mode and workload (shared across variants on a GPU).
    """

    def __init__(self, config: EngineConfig, device, *, model: TransformerStack | None = None,
                 host_costs=None, graph_runner=None) -> None:
        from labkit.attn.prefix_ranges import PREFIX_RANGE_STRATEGIES, make_strategy
        from labkit.mm.scheduler import SCHEDULING_STRATEGIES
        from labkit.mm.step_scheduler import SchedulerConfig, StepScheduler
        from labkit.mm.workload import get_workload_spec, make_requests

        self.config = config
        self.dev = device
        self.model_cfg = get_model_config(config.model)
        choice(SCHEDULING_STRATEGIES, config.scheduling, "scheduling strategy")
        choice([NO_PREFIX, *PREFIX_RANGE_STRATEGIES], config.prefix_ranges, "prefix-range strategy")
        spec = get_workload_spec(config.workload)
        if config.num_requests is not None:
            spec = spec.with_(num_requests=config.num_requests)
        self.spec = spec
        try:
            self.requests = make_requests(spec, config.placeholder)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if config.start_in_decode:
            for r in self.requests:
                r.num_computed_tokens = r.prompt_len - 1  # prompt in the KV cache; next step decodes
        max_item = max((f.mm_position.get_num_embeds() for r in self.requests for f in r.mm_features), default=0)
        self.scheduler = StepScheduler(
            SchedulerConfig(max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=config.max_num_seqs,
                            max_tokens_per_mm_item=max_item),
            config.scheduling,
        )
        self.scheduler.add_requests(self.requests)
        real = getattr(device, "kind", "") == "torch"
        self.model = model or TransformerStack(self.model_cfg, device.device if real else None, seed=config.seed)
        self.torch_device = str(device.device) if real else "cpu"
        if config.prefix_ranges == NO_PREFIX:
            self.prefix = None
            self._ranges_for_layer = lambda layer: None
        else:
            self.prefix = make_strategy(config.prefix_ranges, self.torch_device, validate=False)
            self._ranges_for_layer = self._layer_ranges
        self.host_costs = host_costs
        if host_costs is not None and not real:
            self._schedule_cost = host_costs.schedule_cost(config.placeholder, config.scheduling)
            device.copy_prep_ns = host_costs.range_copy_ns
        elif host_costs is not None:
            raise UsageError("a fixed host cost model only applies to the simulated device")
        self.graph_mode, self.graph_note = effective_mode(config.cudagraph, config.prefix_ranges)
        self.runner = graph_runner if graph_runner is not None else self._make_runner(real)
        self.steps: list[EngineStep] = []
        self._pending = None  # (event, step record fields, host ids) of the step whose tokens are not yet read
        self.sampled: list = []  # real devices: each finished step's sampled ids, int64 (num_seqs,) on the host

    def _make_runner(self, real: bool):
        if self.graph_mode == "none":
            return None
        with_ranges = self.prefix is not None
        if not real:
            from labkit.engine.graphs import SimGraphRunner

            return SimGraphRunner(self.model, self.graph_mode, with_ranges=with_ranges)
        if not self.dev.is_cuda:
            raise UsageError(f"cudagraph {self.config.cudagraph!r} needs a CUDA GPU or the simulated device")
        from labkit.engine.cudagraph_torch import CudaGraphRunner

        return CudaGraphRunner(self.model, self.graph_mode, with_ranges=with_ranges,
                               max_ranges=self._max_ranges(), kv_reserve=self._kv_reserve())

    def _max_seqs(self) -> int:
        return min(len(self.requests), self.config.max_num_seqs)

    def _max_tokens(self) -> int:
        from labkit.engine.graphs import MAX_CAPTURE_SIZE

        if self.config.start_in_decode:
            return self._max_seqs()  # every step is a uniform decode step
        return min(self.config.max_num_batched_tokens, MAX_CAPTURE_SIZE)

    def _max_ranges(self) -> int:
        return max((len(r.mm_features) for r in self.requests), default=0)

    def _kv_reserve(self) -> int:
        # every key any step can hold, plus one per padded row: graphs keep the KV buffers' addresses
        from labkit.engine.graphs import MAX_CAPTURE_SIZE

        return sum(r.prompt_len + r.output_len for r in self.requests) + MAX_CAPTURE_SIZE

    @property
    def graphs_captured(self) -> int:
        """Number of CUDA graphs captured so far (0 when eager)."""
        return 0 if self.runner is None else self.runner.captured

    def capture_graphs(self) -> int:
        """Capture the CUDA graphs of the configured mode (once; before any step); returns their count."""
        if self.runner is not None and not self.runner.captured:
            self.runner.capture(self.dev, self._max_tokens(), self._max_seqs(),
                                decode_only=self.config.start_in_decode)
        return self.graphs_captured

    def _replays(self) -> int:
        if self.runner is None:
            return 0
        return getattr(self.dev, "num_replays", None) if self.dev.kind == "sim" else self.runner.replays

    # -- phases ---------------------------------------------------------------------------------
    def _layer_ranges(self, layer: int):
        return self.dev.produce(self.prefix.tensor_for_layer, layer, self.prefix.ledger)

    def _prepare(self, plan) -> ForwardBatch:
        """Host-side input metadata for ``plan`` and its pinned non-blocking H2D copy."""
        rows = plan.scheduled
        n = len(rows)
        q_lens = np.fromiter((r.num_new_tokens for r in rows), dtype=np.int64, count=n)  # (n,)
        kv_lens = q_lens + np.fromiter((r.num_computed_tokens for r in rows), dtype=np.int64, count=n)  # (n,)
        # a real full-graph step builds its padded inputs once, in the graph's own buffers
        prepared = getattr(self.runner, "prepare", None)
        batch = prepared(self.dev, q_lens, kv_lens) if prepared is not None else None
        return batch if batch is not None else make_batch(self.dev, self.model, q_lens, kv_lens)

    def step(self) -> EngineStep | None:
        """Run one engine step; returns the record of the step whose tokens just arrived (if any)."""
        dev = self.dev
        if self.runner is not None and not self.graphs_captured:
            self.capture_graphs()
        t0 = dev.now_ns()
        with dev.annotate("schedule"):
            plan = self.scheduler.schedule()
            if self.host_costs is not None:
                dev.spend(self._schedule_cost)
        t1 = dev.now_ns()
        if not plan.scheduled:
            return self._drain()
        copies0 = self._copies_so_far()
        with dev.annotate("prepare_metadata"):
            batch = self._prepare(plan)
            if self.host_costs is not None:
                dev.spend(self.host_costs.prepare_ns)  # building inputs and ranges, before their copy
            if self.prefix is not None:
                from labkit.attn.prefix_ranges import ranges_for_batch

                ranges = ranges_for_batch(self.scheduler.batch_requests(plan))
                dev.produce(lambda r: self.prefix.begin_step(r, batch.num_seqs), ranges, self.prefix.ledger)
        t2 = dev.now_ns()
        fwd = self.runner or self.model
        replays0 = self._replays()
        with dev.annotate("forward"):
            h = fwd.forward(dev, batch, self._ranges_for_layer)
        t3 = dev.now_ns()
        with dev.annotate("sample"):
            sampled = fwd.sample(dev, batch, h)
            host_ids = dev.copy_d2h("d2h:sampled", sampled, nbytes=8 * batch.num_seqs, pinned=True,
                                    non_blocking=True)
            event = dev.record_event()
        if self.prefix is not None:
            self.prefix.end_step()
        t4 = dev.now_ns()
        fields = dict(step=plan.step, num_seqs=batch.num_seqs, num_tokens=batch.num_tokens,
                      num_prefill=plan.num_prefill, start_ns=t0, schedule_ns=t1 - t0, prepare_ns=t2 - t1,
                      forward_ns=t3 - t2, sample_ns=t4 - t3,
                      h2d_count=self._copies_so_far() - copies0,
                      graph_mode=self.runner.last.mode if self.runner is not None else "eager",
                      replays=self._replays() - replays0)
        if planned_ahead("async" if self.config.async_scheduling else "sync"):
            done = self._finish(self._pending)  # async: wait only for the previous step's tokens
            self._pending = (event, fields, host_ids)
            return done
        return self._finish((event, fields, host_ids))

    def _copies_so_far(self) -> int:
        if self.prefix is None:
            return 0
        return sum(len(s.copies) for s in self.prefix.ledger.all_steps())

    def _finish(self, pending) -> EngineStep | None:
        if pending is None:
            return None
        event, fields, host_ids = pending
        t = self.dev.now_ns()
        self.dev.wait_event(event)
        out = self.dev.now_ns()
        rec = EngineStep(**fields, wait_ns=out - t, output_ns=out)
        self.steps.append(rec)
        if host_ids is not None:  # its copy is done once the event is: the step's sampled tokens
            self.sampled.append(host_ids)
        return rec

    def _drain(self) -> EngineStep | None:
        done = self._finish(self._pending)
        self._pending = None
        return done

    def run(self, num_steps: int, capture=None) -> list[EngineStep]:
        """Run ``num_steps`` steps (fewer if the workload finishes), then drain; returns all records.

        ``capture`` (``labkit.engine.device.sim_trace.device_capture``'s) gets ``step()`` after each step.
        """
        for _ in range(num_steps):
            if not self.scheduler.has_unfinished():
                break
            self.step()
            if capture is not None:
                capture.step()
        self._drain()
        self.dev.synchronize()
        return self.steps


def summarize_run(engine: Engine, *, warmup_steps: int = 2, measured_steps: int | None = None) -> dict:
    """One flat result row for a run: throughput, step-time quantiles, TPOT, idle fraction.

    Measured steps are the ``measured_steps`` (default: all) after ``warmup_steps``; later steps
    (e.g. profiled ones) are left out. Two throughputs, in output tokens per second:

    - ``tokens_per_s_median``: median sampled tokens per step over the median time between
      consecutive outputs (robust: one stalled step does not move it);
    - ``tokens_per_s_window``: all sampled tokens of the measured steps over the host time from
      the last warm-up output to the last output (includes any one-off stall in the window).

    ``median_ns``/``p20_ns``/``p80_ns``/``max_ns``: quantiles of the time between consecutive
    outputs (= TPOT in steady decode); ``tpot_mean_ms`` is their mean and ``tpot_median_ms`` their
    median; ``stall_ns``: window time beyond ``steps x median`` (0 for steady steps, large when
    one step stalled). ``device_idle_frac``: device idle share of the window (simulated device
    only; None on a real device, where the trace analysis measures it);
    ``device_busy_per_step_ns``: device busy time per measured step (simulated device only).
    ``cudagraph``: the configured mode, ``cudagraph_run``: the mode run (``piecewise`` where
    ``full`` cannot hold the variant), ``cudagraph_note``: why they differ (None when equal),
    ``graph_steps``: ``mode:count`` of the measured steps (``full``/``piecewise``/``eager``),
    ``replays_per_step``: median graph replays per step. Host phase times are medians in ns.
    """
    steps = engine.steps
    if measured_steps is not None:
        steps = steps[:warmup_steps + measured_steps]
    if len(steps) < warmup_steps + 2:
        raise UsageError(f"need at least {warmup_steps + 2} steps to summarise, got {len(steps)}")
    measured = steps[warmup_steps:]
    # output_ns: when a step's tokens reached the host
    t_start = steps[warmup_steps - 1].output_ns if warmup_steps > 0 else steps[0].start_ns
    t_end = measured[-1].output_ns
    intervals = [b.output_ns - a.output_ns for a, b in zip(steps[warmup_steps - 1 if warmup_steps else 0:], measured)]
    intervals = [x for x in intervals if x > 0] or [t_end - t_start]
    timing = summarize(intervals, method="engine_step")
    tokens = sum(s.num_seqs for s in measured)
    tokens_per_step = float(np.median([s.num_seqs for s in measured]))  # one sampled token per row
    window = max(t_end - t_start, 1)
    cfg = engine.config
    dev = engine.dev
    busy = dev.busy_between(t_start, t_end) if getattr(dev, "kind", "") == "sim" else None
    idle = None if busy is None else 1.0 - busy / window

    def med(key):
        return float(np.median([getattr(s, key) for s in measured]))

    modes = Counter(s.graph_mode for s in measured)
    return {
        "variant": cfg.variant_name(),
        **{k: getattr(cfg, k) for k in ("placeholder", "scheduling", "prefix_ranges", "async_scheduling", "model",
                                        "workload")},
        "num_requests": engine.spec.num_requests, "images_per_request": engine.spec.images_per_request,
        "steps": len(measured), "batch_seqs": int(np.median([s.num_seqs for s in measured])),
        "tokens_per_step": tokens_per_step, "tokens_per_s_median": tokens_per_step / (timing.median_ns / 1e9),
        "tokens_per_s_window": tokens / (window / 1e9),
        **{k: getattr(timing, k) for k in ("median_ns", "p20_ns", "p80_ns")}, "max_ns": float(max(intervals)),
        "tpot_median_ms": timing.median_ns / 1e6, "tpot_mean_ms": timing.mean_ns / 1e6, "window_ns": window,
        "stall_ns": max(0.0, window - len(measured) * timing.median_ns), "device_busy_ns": busy,
        "device_busy_per_step_ns": None if busy is None else busy / len(measured), "device_idle_frac": idle,
        "cudagraph": cfg.cudagraph, "cudagraph_run": engine.graph_mode, "cudagraph_note": engine.graph_note,
        "graph_steps": ",".join(f"{k}:{v}" for k, v in sorted(modes.items())), "replays_per_step": med("replays"),
        **{f"host_{p}_ns": med(f"{p}_ns") for p in ("schedule", "prepare", "forward", "sample", "wait")},
        "h2d_per_step": med("h2d_count"),
    }
