"""The engine step loop: schedule -> prepare metadata -> forward -> sample, as vLLM's engine runs it.

``Engine(config, device)`` drives a workload for N steps on a device from
``labkit.engine.devices``:

1. ``schedule``: the lab's ``StepScheduler`` (any placeholder variant, any scheduling strategy)
   plans the step and advances ``num_computed_tokens`` at once (what makes async scheduling work);
2. ``prepare_metadata``: input ids, positions, ``cu_seqlens`` and KV slots built on the host and
   copied with a pinned non-blocking H2D copy; for prefix-LM models the image ranges
   (``ranges_for_batch``, every step, as vLLM's runner) handed to the prefix-range strategy;
3. ``forward``: the decoder layers (``forward/layer_{i}``), each reading its prefix-range tensor
   where its attention runs (a ``per_layer`` strategy makes its copies right there);
4. ``sample``: final norm, LM head, greedy sampling, a non-blocking D2H copy of the ids and an
   event.

Async scheduling (vLLM's default): after launching step n the host waits only for step n-1's
event (its sampled tokens), then schedules step n+1 while the device still runs step n. Sync
scheduling waits for step n's own event before scheduling again, so host work never overlaps
the device.

Each step gives an ``EngineStep`` (host times per phase, output time, tokens); ``summarize_run``
turns a run into one flat result row (tokens/s, step time quantiles, TPOT, device idle fraction).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import numpy as np

from labkit.engine.config import NO_PREFIX, EngineConfig, get_model_config
from labkit.engine.model import StepBatch, TransformerStack
from labkit.errors import UsageError
from labkit.timing import summarize

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineStep:
    """One engine step: host phase times and when its tokens reached the host (all ns).

    ``start_ns``: host time the step's scheduling began; ``output_ns``: host time its sampled
    tokens were available (after the event wait); ``*_ns`` phases are host durations.
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


class Engine:
    """A mini engine over ``device`` (``SimDevice`` or ``TorchDevice``) for ``config``.

    ``model`` may be given (e.g. a prebuilt real stack reused across variants); otherwise a
    weightless stack (simulated device) or a random-weight one (real device) is built.
    """

    def __init__(self, config: EngineConfig, device, *, model: TransformerStack | None = None) -> None:
        from labkit.attn.prefix_ranges import PREFIX_RANGE_STRATEGIES, make_strategy
        from labkit.mm.scheduler import SCHEDULING_STRATEGIES
        from labkit.mm.step_scheduler import SchedulerConfig, StepScheduler
        from labkit.mm.workload import get_workload_spec, make_requests

        self.config = config
        self.dev = device
        self.model_cfg = get_model_config(config.model)
        if config.scheduling not in SCHEDULING_STRATEGIES:
            raise UsageError(f"unknown scheduling strategy {config.scheduling!r}: "
                             f"choose from {', '.join(SCHEDULING_STRATEGIES)}")
        if config.prefix_ranges != NO_PREFIX and config.prefix_ranges not in PREFIX_RANGE_STRATEGIES:
            raise UsageError(f"unknown prefix-range strategy {config.prefix_ranges!r}: choose from "
                             f"{', '.join([NO_PREFIX, *PREFIX_RANGE_STRATEGIES])}")
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
            self._ranges_for_layer = _no_ranges
        else:
            self.prefix = make_strategy(config.prefix_ranges, self.torch_device, validate=False)
            self._ranges_for_layer = self._layer_ranges
        self.steps: list[EngineStep] = []
        self._pending = None  # (event, step record fields) of the step whose tokens are not yet read
        self._output_tokens = 0

    # -- phases ---------------------------------------------------------------------------------
    def _layer_ranges(self, layer: int):
        return self.dev.produce(self.prefix.tensor_for_layer, layer, self.prefix.ledger)

    def _prepare(self, plan) -> StepBatch:
        """Host-side input metadata for ``plan`` and its pinned non-blocking H2D copy."""
        rows = plan.scheduled
        n = len(rows)
        q_lens = np.fromiter((r.num_new_tokens for r in rows), dtype=np.int64, count=n)  # (n,)
        kv_lens = q_lens + np.fromiter((r.num_computed_tokens for r in rows), dtype=np.int64, count=n)  # (n,)
        return make_batch(self.dev, self.model, q_lens, kv_lens)

    def step(self) -> EngineStep | None:
        """Run one engine step; returns the record of the step whose tokens just arrived (if any)."""
        dev = self.dev
        t0 = dev.now_ns()
        with dev.annotate("schedule"):
            plan = self.scheduler.schedule()
        t1 = dev.now_ns()
        if not plan.scheduled:
            return self._drain()
        copies0 = self._copies_so_far()
        with dev.annotate("prepare_metadata"):
            batch = self._prepare(plan)
            if self.prefix is not None:
                from labkit.attn.prefix_ranges import ranges_for_batch

                ranges = ranges_for_batch(self.scheduler.batch_requests(plan))
                dev.produce(lambda r: self.prefix.begin_step(r, batch.num_seqs), ranges, self.prefix.ledger)
        t2 = dev.now_ns()
        with dev.annotate("forward"):
            h = self.model.forward(dev, batch, self._ranges_for_layer)
        t3 = dev.now_ns()
        with dev.annotate("sample"):
            sampled = self.model.sample(dev, batch, h)
            dev.copy_d2h("d2h:sampled", sampled, nbytes=8 * batch.num_seqs, pinned=True, non_blocking=True)
            event = dev.record_event()
        if self.prefix is not None:
            self.prefix.end_step()
        t4 = dev.now_ns()
        fields = dict(step=plan.step, num_seqs=batch.num_seqs, num_tokens=batch.num_tokens,
                      num_prefill=plan.num_prefill, start_ns=t0, schedule_ns=t1 - t0, prepare_ns=t2 - t1,
                      forward_ns=t3 - t2, sample_ns=t4 - t3,
                      h2d_count=self._copies_so_far() - copies0)
        if self.config.async_scheduling:
            done = self._finish(self._pending)
            self._pending = (event, fields)
            return done
        return self._finish((event, fields))

    def _copies_so_far(self) -> int:
        if self.prefix is None:
            return 0
        return sum(len(s.copies) for s in self.prefix.ledger.all_steps())

    def _finish(self, pending) -> EngineStep | None:
        if pending is None:
            return None
        event, fields = pending
        t = self.dev.now_ns()
        self.dev.wait_event(event)
        out = self.dev.now_ns()
        rec = EngineStep(**fields, wait_ns=out - t, output_ns=out)
        self.steps.append(rec)
        self._output_tokens += rec.num_seqs
        return rec

    def _drain(self) -> EngineStep | None:
        done = self._finish(self._pending)
        self._pending = None
        return done

    def run(self, num_steps: int, capture=None) -> list[EngineStep]:
        """Run ``num_steps`` steps (fewer if the workload finishes), then drain; returns all records.

        ``capture`` (from ``labkit.trace.capture.make_capture``) gets ``step()`` after each step.
        """
        from labkit.trace.capture import NullCapture

        cap = capture or NullCapture()
        for _ in range(num_steps):
            if not self.scheduler.has_unfinished():
                break
            self.step()
            cap.step()
        self._drain()
        self.dev.synchronize()
        return self.steps


def make_batch(dev, model: TransformerStack, q_lens, kv_lens) -> StepBatch:
    """Build a step's inputs from per-row query and KV lengths and copy them to ``dev``.

    ``q_lens``/``kv_lens``: int64 arrays ``(num_seqs,)``. Builds input ids, positions,
    ``cu_seqlens`` and KV slots on the host and copies each with a pinned non-blocking H2D copy
    (vLLM's persistent pinned input buffers).
    """
    import torch

    q_lens = np.asarray(q_lens, dtype=np.int64)
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    n = len(q_lens)
    cu_q = np.zeros(n + 1, dtype=np.int64)
    cu_k = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(q_lens, out=cu_q[1:])
    np.cumsum(kv_lens, out=cu_k[1:])
    total_q, total_k = int(cu_q[-1]), int(cu_k[-1])
    # position of every query token: (kv_len - q_len) + j for j < q_len, row by row
    row_of_tok = np.repeat(np.arange(n), q_lens)  # (T,)
    j = np.arange(total_q) - cu_q[row_of_tok]
    positions = (kv_lens - q_lens)[row_of_tok] + j  # (T,)
    slots = cu_k[row_of_tok] + positions  # (T,) packed KV index of each new key
    window = model.cfg.sliding_window
    kv_window = int(np.minimum(kv_lens, window).sum()) if window else total_k
    host = {
        "input_ids": torch.zeros(total_q, dtype=torch.int64),
        "positions": torch.from_numpy(positions),
        "cu_seqlens_q": torch.from_numpy(cu_q.astype(np.int32)),
        "cu_seqlens_k": torch.from_numpy(cu_k.astype(np.int32)),
        "slots": torch.from_numpy(slots),
        "last_idx": torch.from_numpy(cu_q[1:] - 1),
    }
    tensors = {k: dev.copy_h2d(f"h2d:{k}", v, pinned=True, non_blocking=True) for k, v in host.items()}
    model.ensure_kv_capacity(total_k)
    seq_lens = list(zip(q_lens.tolist(), kv_lens.tolist()))
    return StepBatch(n, total_q, total_k, kv_window, tensors, seq_lens)


def _no_ranges(layer: int):
    return None


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
    only; None on a real device, where the trace analysis measures it). Host phase times are
    medians in ns.
    """
    steps = engine.steps
    if measured_steps is not None:
        steps = steps[:warmup_steps + measured_steps]
    if len(steps) < warmup_steps + 2:
        raise UsageError(f"need at least {warmup_steps + 2} steps to summarise, got {len(steps)}")
    measured = steps[warmup_steps:]
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
    idle = None
    busy = None
    if getattr(dev, "kind", "") == "sim":
        busy = dev.busy_between(t_start, t_end)
        idle = 1.0 - busy / window

    def med(key):
        return float(np.median([getattr(s, key) for s in measured]))

    return {
        "variant": cfg.variant_name(),
        "placeholder": cfg.placeholder,
        "scheduling": cfg.scheduling,
        "prefix_ranges": cfg.prefix_ranges,
        "async_scheduling": cfg.async_scheduling,
        "model": cfg.model,
        "workload": cfg.workload,
        "num_requests": engine.spec.num_requests,
        "images_per_request": engine.spec.images_per_request,
        "steps": len(measured),
        "batch_seqs": int(np.median([s.num_seqs for s in measured])),
        "tokens_per_step": tokens_per_step,
        "tokens_per_s_median": tokens_per_step / (timing.median_ns / 1e9),
        "tokens_per_s_window": tokens / (window / 1e9),
        "median_ns": timing.median_ns,
        "p20_ns": timing.p20_ns,
        "p80_ns": timing.p80_ns,
        "max_ns": float(max(intervals)),
        "tpot_median_ms": timing.median_ns / 1e6,
        "tpot_mean_ms": timing.mean_ns / 1e6,
        "window_ns": window,
        "stall_ns": max(0.0, window - len(measured) * timing.median_ns),
        "device_busy_ns": busy,
        "device_idle_frac": idle,
        "host_schedule_ns": med("schedule_ns"),
        "host_prepare_ns": med("prepare_ns"),
        "host_forward_ns": med("forward_ns"),
        "host_sample_ns": med("sample_ns"),
        "host_wait_ns": med("wait_ns"),
        "h2d_per_step": med("h2d_count"),
    }


def step_rows(engine: Engine) -> list[dict]:
    """Every step record as a flat dict (``_ns`` host times), tagged with the variant."""
    v = engine.config.variant_name()
    return [{"variant": v, **asdict(s)} for s in engine.steps]
