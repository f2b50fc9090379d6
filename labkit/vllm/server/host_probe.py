"""The host a real ``vllm serve`` pays per engine step outside the step itself: a probe the lab's plugin installs.

The census (:mod:`labkit.vllm.census.step_census`) times vLLM's engine step in one process.
A server also pays, per step, work the census never sees:

- in the engine core process, its **output thread** (``EngineCoreProc.process_output_sockets``:
  msgpack encoding of each step's ``EngineCoreOutputs`` and the ZMQ send) and its **input
  thread** (``process_input_sockets``: decoding the requests that arrive); both share the core's
  interpreter lock with the busy loop that schedules and prepares the steps;
- in the API server process, everything it does with a step's outputs: the output processor
  (detokenizing), and for every request the stream's chunk (the chat response object, its JSON,
  the SSE line, the HTTP write).

With ``$LABKIT_VLLM_SERVE_HOST=<folder>`` in the server's environment, labkit's vLLM plugin
(:func:`labkit.vllm.ab.load_plugin`) wraps, in the process that has it:

- ``EngineCoreProc._process_engine_step`` (engine core): one ``step`` event per step with its
  start and end (``t0``, ``t``: ``time.perf_counter()``, s), the scheduler's ``running``,
  ``waiting`` and ``prefilling`` (running requests still short of their prompt) counts *before*
  the step, and the cumulative CPU time (ns) of the output and input threads
  (``out_cpu_ns``, ``in_cpu_ns``: each thread's own CPU clock) read at the step's end;
- ``OutputProcessor.process_outputs`` (API server): one ``outputs`` event per call with the
  number of outputs, the call's own thread CPU time (``call_cpu_ns``) and the process's cumulative
  CPU time at its end (``proc_cpu_ns``), which, between two calls in steady decode, is everything
  the API server spent on one step's outputs.

Events are JSON lines in ``<folder>/serve-host-<pid>.jsonl``;
:mod:`labkit.vllm.server.serve_host` reads them. Per step a few clock reads and one appended line
are added to the core's busy loop (recorded beside the results as the probe's own cost).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["ENV_VAR", "install_probe", "thread_cpu_ns"]

ENV_VAR = "LABKIT_VLLM_SERVE_HOST"
_installed: set = set()
_lock = threading.Lock()


def thread_cpu_ns(thread: threading.Thread | None) -> int | None:
    """``thread``'s own CPU time (ns), None when it is not running."""
    if thread is None or thread.ident is None or not thread.is_alive():
        return None
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
    except (OSError, AttributeError):
        return None


def _thread_running(target: str) -> threading.Thread | None:
    """The live thread started with a target named ``target`` (vLLM keeps no handle on the input thread)."""
    for t in threading.enumerate():
        fn = getattr(t, "_target", None)
        if getattr(fn, "__name__", None) == target:
            return t
    return None


class _Log:
    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"serve-host-{os.getpid()}.jsonl"

    def write(self, event: dict) -> None:
        event["pid"] = os.getpid()
        line = json.dumps(event) + "\n"
        with _lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)


def _counts(core) -> dict:
    sched = getattr(core, "scheduler", None)
    running = list(getattr(sched, "running", ()) or ())
    prefilling = sum(1 for r in running if getattr(r, "num_computed_tokens", 0) < getattr(r, "num_prompt_tokens", 0))
    return {"running": len(running), "waiting": len(getattr(sched, "waiting", ()) or ()), "prefilling": prefilling}


def _wrap_step(owner, log: _Log) -> bool:
    fn = getattr(owner, "_process_engine_step", None)
    if fn is None or getattr(fn, "_labkit_serve_host", False):
        return False
    threads: dict = {}

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        before = _counts(self)
        t0 = time.perf_counter()
        out = fn(self, *args, **kwargs)
        t1 = time.perf_counter()
        if "in" not in threads or threads["in"] is None:
            threads["in"] = _thread_running("process_input_sockets")
        log.write({"event": "step", "t0": t0, "t": t1, **before,
                   "out_cpu_ns": thread_cpu_ns(getattr(self, "output_thread", None)),
                   "in_cpu_ns": thread_cpu_ns(threads["in"])})
        return out

    wrapper._labkit_serve_host = True  # type: ignore[attr-defined]
    setattr(owner, "_process_engine_step", wrapper)
    return True


def _wrap_outputs(owner, log: _Log) -> bool:
    fn = getattr(owner, "process_outputs", None)
    if fn is None or getattr(fn, "_labkit_serve_host", False):
        return False

    @functools.wraps(fn)
    def wrapper(self, engine_core_outputs, *args, **kwargs):
        c0 = time.thread_time_ns()
        out = fn(self, engine_core_outputs, *args, **kwargs)
        log.write({"event": "outputs", "t": time.perf_counter(), "outputs": len(engine_core_outputs),
                   "call_cpu_ns": time.thread_time_ns() - c0, "proc_cpu_ns": time.process_time_ns()})
        return out

    wrapper._labkit_serve_host = True  # type: ignore[attr-defined]
    setattr(owner, "process_outputs", wrapper)
    return True


def install_probe(folder: str | os.PathLike | None = None) -> list[str]:
    """Wrap what this process's vLLM has (``folder``: default ``$LABKIT_VLLM_SERVE_HOST``); the names
    wrapped. Idempotent."""
    folder = folder if folder is not None else os.environ.get(ENV_VAR, "").strip()
    if not folder:
        return []
    log = _Log(Path(folder))
    done: list[str] = []
    try:
        from vllm.v1.engine.core import EngineCoreProc

        if "step" not in _installed and _wrap_step(EngineCoreProc, log):
            done.append("step")
    except ImportError:
        pass
    try:
        from vllm.v1.engine.output_processor import OutputProcessor

        if "outputs" not in _installed and _wrap_outputs(OutputProcessor, log):
            done.append("outputs")
    except ImportError:
        pass
    _installed.update(done)
    if done:
        logger.warning("labkit serve-host probe: %s in process %d -> %s", ", ".join(done), os.getpid(), log.path)
    return done
