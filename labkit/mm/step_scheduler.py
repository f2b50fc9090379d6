"""The step scheduler: one call to ``schedule()`` plans one engine step (a compact vLLM v1 ``Scheduler``).

More: docs/reference.md, ``labkit.mm.step_scheduler``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from labkit.errors import UsageError
from labkit.mm.encoder_cache import EncoderCacheManager
from labkit.mm.scheduler import SchedulingStrategy, make_strategy

__all__ = ["SchedulerConfig", "ScheduledRequest", "StepPlan", "StepScheduler", "free_encoder_inputs", "run_workload"]


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduler limits.

    ``max_num_batched_tokens``: token budget per step. ``max_num_seqs``: most running
    requests. ``encoder_cache_size``: cache size in embeddings (None: the token budget, as
    vLLM sets it). ``max_tokens_per_mm_item``: the model's largest item in embeddings; the
    encoder budget and cache are at least this. ``kv_capacity_tokens``: KV-cache size in
    tokens (None: unlimited), allocated in blocks of ``block_size`` tokens.
    ``shift_computed_tokens``: EAGLE look-ahead (0 or 1), passed for running and waiting
    requests alike.
    """

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    encoder_cache_size: int | None = None
    max_tokens_per_mm_item: int = 0
    kv_capacity_tokens: int | None = None
    block_size: int = 16
    disable_chunked_mm_input: bool = False
    shift_computed_tokens: int = 0

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1 or self.block_size < 1:
            raise UsageError("max_num_batched_tokens, max_num_seqs and block_size must be >= 1")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < self.block_size:
            raise UsageError(f"kv_capacity_tokens must be >= block_size ({self.block_size})")
        if self.shift_computed_tokens not in (0, 1):
            raise UsageError("shift_computed_tokens must be 0 or 1")

    @property
    def encoder_compute_budget(self) -> int:
        """Embeddings the encoder may compute per step."""
        return max(self.max_num_batched_tokens, self.max_tokens_per_mm_item)

    @property
    def encoder_cache_embeds(self) -> int:
        """Encoder cache size in embeddings."""
        size = self.encoder_cache_size if self.encoder_cache_size is not None else self.max_num_batched_tokens
        return max(size, self.max_tokens_per_mm_item)

    @property
    def kv_capacity_blocks(self) -> int | None:
        return None if self.kv_capacity_tokens is None else self.kv_capacity_tokens // self.block_size


class ScheduledRequest(NamedTuple):
    """One row of a step's batch.

    ``num_computed_tokens`` is the value *before* this step; the row computes tokens
    ``[num_computed_tokens, num_computed_tokens + num_new_tokens)``. ``encoder_inputs`` are
    indices into the request's ``mm_features`` encoded this step.
    """

    request_id: str
    row: int
    num_new_tokens: int
    num_computed_tokens: int
    is_prefill: bool
    encoder_inputs: tuple[int, ...]


@dataclass(frozen=True)
class StepPlan:
    """What one engine step does (immutable; equal plans mean identical decisions).

    ``scheduled``: rows in batch order (running requests first, then newly admitted ones).
    ``finished_request_ids``: requests that produced their last token in the previous step
    and were removed before this one (vLLM's meaning: the worker frees their state).
    ``freed_mm_hashes``: encoder outputs evicted while planning this step.
    ``preempted_request_ids``: running requests sent back to waiting this step.
    """

    step: int
    scheduled: tuple[ScheduledRequest, ...]
    finished_request_ids: tuple[str, ...]
    freed_mm_hashes: tuple[str, ...]
    preempted_request_ids: tuple[str, ...]

    @property
    def request_ids(self) -> list[str]:
        return [s.request_id for s in self.scheduled]

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def num_prefill(self) -> int:
        return sum(1 for s in self.scheduled if s.is_prefill)

    @property
    def encoder_inputs(self) -> dict[str, tuple[int, ...]]:
        """request id -> item indices encoded this step (only requests with any)."""
        return {s.request_id: s.encoder_inputs for s in self.scheduled if s.encoder_inputs}


def free_encoder_inputs(cache: EncoderCacheManager, request) -> None:
    """Release ``request``'s cached items whose placeholder is wholly in the KV cache (vLLM 0.20.0's rule)."""
    cached_ids = cache.get_cached_input_ids(request)
    if not cached_ids:
        return
    computed = request.num_computed_tokens
    feats = request.mm_features
    for input_id in list(cached_ids):
        pos = feats[input_id].mm_position
        if pos.offset + pos.length <= computed:
            cache.free_encoder_input(request, input_id)


class StepScheduler:
    """Plans engine steps for a set of requests (any placeholder variant, any strategy)."""

    def __init__(self, config: SchedulerConfig | None = None, strategy: str | SchedulingStrategy = "loop") -> None:
        self.config = config or SchedulerConfig()
        self.strategy = make_strategy(strategy) if isinstance(strategy, str) else strategy
        self.cache = EncoderCacheManager(self.config.encoder_cache_embeds)
        self.requests: dict[str, object] = {}
        self.waiting: deque = deque()
        self.running: list = []
        self.finished: list[str] = []
        self.log: list[StepPlan] = []
        self.step_index = 0
        self._kv_blocks: dict[str, int] = {}
        self._kv_used = 0
        self._just_finished: list = []
        self._outputs_processed = 0  # plans whose bookkeeping (update_from_output) is done

    # -- input -------------------------------------------------------------------------
    def add_request(self, request) -> None:
        """Queue a fresh request (``num_computed_tokens == 0``); UsageError if it can never run."""
        cfg = self.config
        if request.request_id in self.requests:
            raise UsageError(f"duplicate request id {request.request_id!r}")
        limit = min(cfg.encoder_compute_budget, cfg.encoder_cache_embeds)
        for i, feat in enumerate(request.mm_features):
            pos = feat.mm_position
            if request.get_num_encoder_embeds(i) > limit:
                raise UsageError(f"{request.request_id}: item {i} needs {request.get_num_encoder_embeds(i)} "
                                 f"embeddings, more than the encoder budget/cache ({limit})")
            if cfg.disable_chunked_mm_input and pos.length > cfg.max_num_batched_tokens:
                raise UsageError(f"{request.request_id}: item {i} spans {pos.length} tokens, more than "
                                 f"max_num_batched_tokens={cfg.max_num_batched_tokens} with chunked mm input disabled")
        blocks = cfg.kv_capacity_blocks
        if blocks is not None and -(-(request.prompt_len + request.output_len) // cfg.block_size) > blocks:
            raise UsageError(f"{request.request_id}: needs more KV blocks than the cache holds ({blocks})")
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def add_requests(self, requests) -> None:
        for r in requests:
            self.add_request(r)

    def has_unfinished(self) -> bool:
        """True while some request is waiting or running and has not produced its last token."""
        return bool(self.waiting) or len(self.running) > len(self._just_finished)

    def batch_requests(self, plan: StepPlan | None = None) -> list:
        """The request objects of ``plan``'s rows (default: the latest plan), in row order."""
        plan = plan if plan is not None else (self.log[-1] if self.log else None)
        return [] if plan is None else [self.requests[rid] for rid in plan.request_ids]

    # -- KV blocks ---------------------------------------------------------------------
    def _allocate_kv(self, request, num_new_tokens: int) -> bool:
        cap = self.config.kv_capacity_blocks
        if cap is None:
            return True
        need = -(-(request.num_computed_tokens + num_new_tokens) // self.config.block_size)
        have = self._kv_blocks.get(request.request_id, 0)
        extra = need - have
        if extra <= 0:
            return True
        if self._kv_used + extra > cap:
            return False
        self._kv_blocks[request.request_id] = need
        self._kv_used += extra
        return True

    def _free_kv(self, request) -> None:
        self._kv_used -= self._kv_blocks.pop(request.request_id, 0)

    # -- bookkeeping -------------------------------------------------------------------
    def _preempt(self, request) -> None:
        self.cache.free(request)
        self._free_kv(request)
        request.num_computed_tokens = 0
        self.waiting.appendleft(request)

    def collect_finished(self) -> tuple[str, ...]:
        """Bookkeeping for the latest step (vLLM's ``update_from_output``), once per plan; returns the finished ids."""
        if self._outputs_processed >= len(self.log):
            return ()
        plan = self.log[-1]
        self._outputs_processed = len(self.log)
        done = {id(r) for r in self._just_finished}
        self._just_finished = []
        cache = self.cache
        finished_ids = []
        for row in plan.scheduled:
            req = self.requests[row.request_id]
            if req.has_encoder_inputs:
                free_encoder_inputs(cache, req)
            if id(req) in done:
                cache.free(req)
                self._free_kv(req)
                self.strategy.forget(req.request_id)
                self.finished.append(req.request_id)
                finished_ids.append(req.request_id)
        if done:
            self.running = [r for r in self.running if id(r) not in done]
        return tuple(finished_ids)

    # -- one step ----------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        """Plan the next engine step, advance the requests' counters and log the plan."""
        cfg = self.config
        finished_ids = self.collect_finished()

        token_budget = cfg.max_num_batched_tokens
        encoder_budget = cfg.encoder_compute_budget
        strategy = self.strategy
        cache = self.cache
        shift = cfg.shift_computed_tokens
        no_chunk = cfg.disable_chunked_mm_input
        chosen: list[tuple] = []  # (request, num_new_tokens, encoder_inputs)
        preempted: list[str] = []

        running = self.running
        idx = 0
        while idx < len(running) and token_budget > 0:
            req = running[idx]
            num_new = min(req.num_tokens - req.num_computed_tokens, token_budget)
            enc: list[int] = []
            new_budget = encoder_budget
            if req.has_encoder_inputs:
                enc, num_new, new_budget = strategy.schedule(
                    req, req.num_computed_tokens, num_new, encoder_budget, cache, shift, no_chunk)
            if num_new == 0:
                idx += 1
                continue
            scheduled = True
            while not self._allocate_kv(req, num_new):
                victim = running.pop()  # most recently admitted
                self._preempt(victim)
                preempted.append(victim.request_id)
                if victim is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            chosen.append((req, num_new, enc))
            token_budget -= num_new
            encoder_budget = new_budget
            for i in enc:
                cache.allocate(req, i)
            idx += 1

        if not preempted:
            waiting = self.waiting
            while waiting and token_budget > 0 and len(running) < cfg.max_num_seqs:
                req = waiting[0]
                num_new = min(req.num_tokens - req.num_computed_tokens, token_budget)
                enc = []
                new_budget = encoder_budget
                if req.has_encoder_inputs:
                    enc, num_new, new_budget = strategy.schedule(
                        req, req.num_computed_tokens, num_new, encoder_budget, cache, shift, no_chunk)
                    if num_new == 0:
                        break
                if not self._allocate_kv(req, num_new):
                    if req.has_encoder_inputs:
                        cache.free(req)  # drop references taken by cache hits
                    break
                waiting.popleft()
                running.append(req)
                chosen.append((req, num_new, enc))
                token_budget -= num_new
                encoder_budget = new_budget
                for i in enc:
                    cache.allocate(req, i)

        rows = []
        for row, (req, num_new, enc) in enumerate(chosen):
            before = req.num_computed_tokens
            known = req.num_tokens
            rows.append(ScheduledRequest(req.request_id, row, num_new, before, before < known - 1, tuple(enc)))
            req.num_computed_tokens = before + num_new
            if req.num_computed_tokens >= known:
                req.num_output_tokens += 1  # sampled this step (a placeholder under async scheduling)
                if req.num_output_tokens >= req.output_len:
                    self._just_finished.append(req)

        plan = StepPlan(self.step_index, tuple(rows), finished_ids,
                        tuple(cache.get_freed_mm_hashes()), tuple(preempted))
        self.step_index += 1
        self.log.append(plan)
        return plan

    def _outputs_sampled(self) -> int:
        return sum(r.num_output_tokens for r in self.requests.values())

    def run(self, max_steps: int | None = None) -> list[StepPlan]:
        """Schedule until every request finished (or ``max_steps``); returns this run's plans.

        Raises RuntimeError on a stall (two empty steps while work remains) or a livelock (no token
        sampled for far longer than recomputing everything would take).
        """
        plans = []
        idle = 0
        outputs = self._outputs_sampled()
        patience = 8 * sum(r.prompt_len + r.output_len for r in self.requests.values()) + 64
        since_output = 0
        while self.has_unfinished() and (max_steps is None or len(plans) < max_steps):
            plan = self.schedule()
            plans.append(plan)
            now = self._outputs_sampled()
            since_output = 0 if now > outputs else since_output + 1
            outputs = max(outputs, now)
            if since_output > patience:
                raise RuntimeError(f"scheduler stalled at step {plan.step}: no token sampled in "
                                   f"{since_output} steps of work ({len(self.running)} running, "
                                   f"{len(self.waiting)} waiting)")
            if plan.scheduled or plan.finished_request_ids or plan.preempted_request_ids:
                idle = 0
                continue
            idle += 1
            if idle >= 2:
                raise RuntimeError(f"scheduler stalled at step {plan.step}: nothing schedulable "
                                   f"({len(self.running)} running, {len(self.waiting)} waiting)")
        if not self.has_unfinished():
            self.collect_finished()
        return plans


def run_workload(requests, config: SchedulerConfig | None = None, strategy: str = "loop") -> StepScheduler:
    """Run fresh ``requests`` to completion; returns the scheduler (its ``log`` holds every plan)."""
    sched = StepScheduler(config, strategy)
    sched.add_requests(requests)
    sched.run()
    return sched
