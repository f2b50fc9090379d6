"""``labkit bench vllm-overlap``: what vLLM's engine core hides behind the forward (result ``vllm_overlap``).

More: docs/reference.md, ``labkit.vllm.census.bench_vllm_overlap``.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import tempfile
import threading
import time
from concurrent.futures import Future

from labkit.bench import Bench, add_run_options, report, resolve_run_options
from labkit.errors import UsageError
from labkit.results import VLLM_OVERLAP
from labkit.vllm.serving import (ServeConfig, ServeWorkload, kv_blocks_for, make_serving_scheduler, make_vllm_requests,
                                 prompt_layout, runner_output)

__all__ = ["OVERLAP", "reading", "measure", "add_cli_args", "main"]

#: the result: requests x images, the forward times (ms) and timed steps per point at each size; its table.
#: Not a plain sweep: the arms alternate within each round (:func:`measure`), the rows go through the runner
OVERLAP = Bench(VLLM_OVERLAP, knobs={"requests": (8, 128), "images": (4, 32), "steps": (8, 24),
                                     "forward_ms": ((0.0, 2.0, 8.0, 30.0), (0.0, 5.0, 10.0, 20.0, 40.0, 80.0))},
                columns=("regime", "arm", "forward_ms", "step_ms", "schedule_ms", "update_ms", "non_overlap_ms", "bound"))
ARMS = ("baseline", "pr40143")


def reading(step_ms: float, forward_ms: float, host_ms: float) -> dict:
    """One point read against the chain alone (``host_ms``): which side sets the step and what is left over."""
    bound = "device" if forward_ms >= host_ms else "host"
    return {"bound": bound, "non_overlap_ms": step_ms - max(forward_ms, host_ms),
            "serial_excess_ms": step_ms - (forward_ms + host_ms)}


class _Device:
    """The stand-in executor: each launched step sleeps ``forward_s`` on the device thread, in order."""

    def __init__(self, scheduler) -> None:
        self.s, self.forward_s = scheduler, 0.0
        self.launched: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            fut, out, forward_s = self.launched.get()
            time.sleep(forward_s)
            fut.set_result(out)

    def execute_model(self, scheduler_output, non_block: bool = False):
        self._pending: Future = Future()
        self.launched.put((self._pending, runner_output(self.s, scheduler_output), self.forward_s))
        done: Future = Future()
        done.set_result(None)
        return done if non_block else None

    def sample_tokens(self, grammar_output, non_block: bool = False):
        return self._pending if non_block else self._pending.result()


def _engine(model_dir, workload, async_scheduling: bool):
    """vLLM's ``EngineCore`` (its step methods, batch queue and scheduler) around the stand-in device."""
    from collections import deque

    from vllm.v1.engine.core import EngineCore
    from vllm.v1.serial_utils import MsgpackEncoder

    prompt_len, spans = prompt_layout(workload)
    config = ServeConfig(max_num_seqs=workload.requests, async_scheduling=async_scheduling,
                         num_blocks=kv_blocks_for(workload.requests, prompt_len, workload.output_tokens),
                         max_item_tokens=spans[0].length if spans else 1)
    core = object.__new__(EngineCore)
    core.scheduler = make_serving_scheduler(model_dir, config)
    core.model_executor = _Device(core.scheduler)
    core.vllm_config = core.scheduler.vllm_config
    core.batch_queue_size = 2 if async_scheduling else 1
    core.batch_queue = deque(maxlen=2) if async_scheduling else None
    core.step_fn = core.step_with_batch_queue if async_scheduling else core.step
    core.log_stats, core.is_mm_encoder_only, core.is_pooling_model = False, False, False
    core.async_scheduling, core.check_for_draft_tokens, core._weight_version = async_scheduling, False, None
    core.aborts_queue = queue.Queue()
    outputs: queue.Queue = queue.Queue()

    def serialize() -> None:  # the engine core's output thread: msgpack every step's outputs
        encoder = MsgpackEncoder()
        while True:
            for out in outputs.get().values():
                encoder.encode(out)

    threading.Thread(target=serialize, daemon=True).start()
    return core, outputs


def _timed_block(core, outputs, steps: int) -> dict:
    """``steps`` engine-loop iterations timed (after two left out), and the engine thread's parts."""
    sched, parts = core.scheduler, {"schedule": 0.0, "update": 0.0}
    schedule, update = sched.schedule, sched.update_from_output

    def timed(name, fn):
        def call(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                parts[name] += time.perf_counter() - t0
        return call

    for _ in range(2):
        out, _ = core.step_fn()
        outputs.put(out or {})
    sched.schedule, sched.update_from_output = timed("schedule", schedule), timed("update", update)
    t0 = time.perf_counter()
    try:
        for _ in range(steps):
            out, _ = core.step_fn()
            outputs.put(out or {})
    finally:
        wall = time.perf_counter() - t0
        sched.schedule, sched.update_from_output = schedule, update
    return {"step_ms": wall / steps * 1e3, "schedule_ms": parts["schedule"] / steps * 1e3,
            "update_ms": parts["update"] / steps * 1e3}


def _admit(core, outputs, requests) -> None:
    for r in requests:
        core.scheduler.add_request(r)
    for _ in range(100_000):
        out, _ = core.step_fn()
        outputs.put(out or {})
        if not core.scheduler.waiting and all(r.num_output_tokens > 0 for r in core.scheduler.running):
            return
    raise RuntimeError("the requests did not reach decode")


def measure(size: str = "quick", arms=ARMS, rounds: int = 2) -> list[dict]:
    """One row per regime x arm x forward time: the medians over ``rounds`` rounds (arms
    alternating in each) and each point read against that regime and arm's step with no forward."""
    from labkit.vllm.ab import patched_vllm
    from labkit.vllm.census.sched_census import write_model_config

    plan = OVERLAP.at(size)
    total = rounds * len(arms) * len(plan["forward_ms"]) * (plan["steps"] + 4) + 64
    workload = ServeWorkload("overlap", plan["requests"], plan["images"], 1024, 1536, 16, total, plan["requests"])
    got: dict = {}
    with tempfile.TemporaryDirectory(prefix="labkit-overlap-") as tmp:
        model_dir = write_model_config(tmp)
        for regime in ("async", "sync"):
            core, outputs = _engine(model_dir, workload, regime == "async")
            with patched_vllm("pr40143"):
                _admit(core, outputs, make_vllm_requests(workload, prefix=f"{regime}-"))
            for r in range(rounds):
                for arm in (arms if r % 2 == 0 else tuple(reversed(arms))):
                    with patched_vllm(arm):
                        for fwd in plan["forward_ms"]:
                            core.model_executor.forward_s = fwd / 1e3
                            got.setdefault((regime, arm, fwd), []).append(_timed_block(core, outputs, plan["steps"]))
    rows = [{"regime": regime, "arm": arm, "forward_ms": fwd, "requests": plan["requests"], "images": plan["images"],
             **{k: statistics.median(b[k] for b in blocks) for k in blocks[0]}}
            for (regime, arm, fwd), blocks in got.items()]
    for row in rows:
        alone = next(r["step_ms"] for r in rows if (r["regime"], r["arm"], r["forward_ms"]) == (row["regime"], row["arm"], 0.0))
        row.update(host_alone_ms=alone, **reading(row["step_ms"], row["forward_ms"], alone))
    return rows


def add_cli_args(p: argparse.ArgumentParser) -> None:
    add_run_options(p, size_help="quick (default: 8 requests x 4 images) or full (128 x 32, #40143's)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the arms, alternating (default 2)")


def main(args: argparse.Namespace) -> int:
    from labkit.device import describe_machine
    from labkit.machine_load import describe_load, machine_load
    from labkit.vllm.census.bench_vllm_step import require_vllm

    size = resolve_run_options(args)
    if args.rounds < 1:
        raise UsageError("--rounds must be >= 1")
    version = require_vllm()
    with machine_load() as load:
        rows = measure(size, rounds=args.rounds)
    asy = [r["non_overlap_ms"] for r in rows if r["regime"] == "async" and r["forward_ms"] > 0]
    params = {"vllm_version": version, "rounds": args.rounds, **OVERLAP.at(size), "machine_load": load,
              "non_overlap_ms": statistics.median(asy),
              "engine": "vLLM's EngineCore.step_with_batch_queue (async, batch queue 2) and EngineCore.step (sync) "
                        "over its AsyncScheduler / Scheduler; a stand-in device sleeps the forward time on its own "
                        "thread; outputs msgpack-encoded on another", "cpu": describe_machine().get("cpu_model")}
    report(args, OVERLAP.result(rows, size, params=params), OVERLAP.columns)
    print(f"async, forward > 0: median step - max(forward, host alone) = {params['non_overlap_ms']:.2f} ms")
    print(describe_load(load))
    return 0
