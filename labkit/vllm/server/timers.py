"""Timers the lab's vLLM plugin sets in vLLM's own server when ``$LABKIT_SERVE_TIMERS`` names a folder.

More: docs/reference.md, ``labkit.vllm.server.timers``.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import os
import threading
import time
from pathlib import Path

ENV_VAR = "LABKIT_SERVE_TIMERS"
_request: contextvars.ContextVar = contextvars.ContextVar("labkit_request", default=None)
_lock = threading.Lock()
_installed: list = []


def _writer(folder: str, side: str):
    path = Path(folder) / f"{side}-{os.getpid()}.jsonl"

    def write(record: dict) -> None:
        line = json.dumps(record) + "\n"
        with _lock, path.open("a", encoding="utf-8") as f:
            f.write(line)
    return write


def _api_server(write) -> None:
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.multimodal.media import connector
    from vllm.renderers.base import BaseRenderer
    from vllm.v1.engine.async_llm import AsyncLLM

    ids = itertools.count()
    handle, load, init = OpenAIServingChat.create_chat_completion, connector.MediaConnector.load_from_url_async, \
        BaseRenderer.__init__
    add, generate = AsyncLLM.add_request, AsyncLLM.generate

    async def create_chat_completion(self, request, raw_request=None):
        record = {"handler_s": time.perf_counter(), "media": [], "processor": []}
        _request.set(record)
        record["id"] = next(ids)
        return await handle(self, request, raw_request)

    async def load_from_url_async(self, url, media_io, *, fetch_timeout=None):
        record = _request.get()
        if record is None or url[:5].lower() != "data:":
            return await load(self, url, media_io, fetch_timeout=fetch_timeout)
        queued = time.perf_counter()

        def run():  # what vLLM submits to its media pool for a data URL, timed
            start = time.perf_counter()
            out = self._load_data_url(url, media_io)
            record["media"].append((queued, start, time.perf_counter()))
            return out
        return await asyncio.get_running_loop().run_in_executor(connector.global_thread_pool, run)

    def renderer_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        process, executor = self._process_multimodal, self._mm_executor

        def process_async(*a, **kw):  # vLLM's make_async on the same single-worker executor, timed
            record, queued = _request.get(), time.perf_counter()

            def run():
                start = time.perf_counter()
                out = process(*a, **kw)
                if record is not None:
                    record["processor"].append((queued, start, time.perf_counter()))
                return out
            return asyncio.get_event_loop().run_in_executor(executor, run)
        self._process_multimodal_async = process_async

    async def add_request(self, *args, **kwargs):
        out = await add(self, *args, **kwargs)
        record = _request.get()
        if record is not None:
            record["handover_s"] = time.perf_counter()
        return out

    def timed_generate(self, *args, **kwargs):
        record = _request.get()  # called in the handler's task; iterated in the response's (another task)

        async def outputs():
            if record is not None:
                _request.set(record)
            try:
                async for out in generate(self, *args, **kwargs):
                    if record is not None:
                        record.setdefault("first_output_s", time.perf_counter())
                    yield out
            finally:
                if record is not None:
                    record["finish_s"] = time.perf_counter()
                    write(record)
        return outputs()

    OpenAIServingChat.create_chat_completion = create_chat_completion
    connector.MediaConnector.load_from_url_async = load_from_url_async
    BaseRenderer.__init__ = renderer_init
    AsyncLLM.add_request, AsyncLLM.generate = add_request, timed_generate


def _engine_core(write) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    schedule, update = Scheduler.schedule, Scheduler.update_from_output
    started: dict = {}

    def timed_schedule(self, *args, **kwargs):
        start = time.perf_counter()
        out = schedule(self, *args, **kwargs)
        started[id(out)] = (start, time.perf_counter())
        return out

    def timed_update(self, scheduler_output, *args, **kwargs):
        start = time.perf_counter()
        out = update(self, scheduler_output, *args, **kwargs)
        sched = started.pop(id(scheduler_output), None)
        tokens = scheduler_output.total_num_scheduled_tokens
        if sched is not None and tokens:
            write({"schedule_s": sched, "update_s": (start, time.perf_counter()), "tokens": tokens,
                   "requests": len(scheduler_output.num_scheduled_tokens)})
        return out

    Scheduler.schedule, Scheduler.update_from_output = timed_schedule, timed_update


def install() -> bool:
    """Set the timers in this process when ``$LABKIT_SERVE_TIMERS`` names a folder (once per process)."""
    folder = os.environ.get(ENV_VAR, "").strip()
    if not folder or _installed:
        return False
    import multiprocessing

    Path(folder).mkdir(parents=True, exist_ok=True)
    name = multiprocessing.current_process().name
    if name == "MainProcess":
        _api_server(_writer(folder, "api"))
    elif name.startswith("EngineCore"):
        _engine_core(_writer(folder, "core"))
    _installed.append(folder)
    return True
