"""When each request reaches each stage of a real ``vllm serve``: a probe the lab's plugin installs.

With ``$LABKIT_VLLM_HANDOVER=<folder>`` in the server's environment, labkit's vLLM plugin
(:func:`labkit.vllm.ab.load_plugin`, loaded by vLLM in every process it starts) wraps, in the
process that has it:

- ``api_entry``: ``OpenAIServingChat.create_chat_completion`` called (API server: the HTTP body
  was received and parsed into a request);
- ``render_start``: the renderer's ``render_chat_async`` called (the chat messages and their
  images begin their input processing);
- ``api_send``: the engine client's ``add_request_async`` called (API server: the request's
  inputs are done and it is sent to the engine core);
- ``engine_add``: ``EngineCore.add_request`` called (engine core: the request joins the
  scheduler; the core takes new requests between steps).

Each event is one JSON line ``{"event", "t" (time.perf_counter(), s: the monotonic clock every
process of the machine shares, the one ``vllm bench serve`` stamps its requests' start
with), "wall" (time.time()), "cpu" (the process's CPU time, s), "pid", "request_id"?,
"arrival_time"? (the request's time.time() stamp from the API server)}`` appended to
``<folder>/events-<pid>.jsonl``. :mod:`labkit.vllm.server.handover` reads them. Only the
wrappers' clock reads and one appended line are added to each call.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import threading
import time
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["ENV_VAR", "EVENTS", "install_probe"]

ENV_VAR = "LABKIT_VLLM_HANDOVER"
EVENTS = ("api_entry", "render_start", "api_send", "engine_add")

_lock = threading.Lock()
_installed: set = set()


class _Log:
    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"events-{os.getpid()}.jsonl"

    def write(self, **event) -> None:
        event.update(t=time.perf_counter(), wall=time.time(), cpu=time.process_time(), pid=os.getpid())
        line = json.dumps(event) + "\n"
        with _lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)


def _request_fields(request) -> dict:
    return {"request_id": str(getattr(request, "request_id", "")),
            "arrival_time": getattr(request, "arrival_time", None)}


def _wrap(owner, name: str, log: _Log, event: str, *, with_request: bool = False) -> bool:
    """Wrap ``owner.name`` (sync or async) to log ``event`` on each call; ``with_request``: its first
    argument after ``self`` is a request whose id and arrival time are logged. False where there is
    no such member or it is wrapped already."""
    fn = getattr(owner, name, None)
    if fn is None or getattr(fn, "_labkit_probe", False):
        return False

    def note(args) -> None:
        log.write(event=event, **(_request_fields(args[1]) if with_request else {}))

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            note(args)
            return await fn(*args, **kwargs)
    else:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            note(args)
            return fn(*args, **kwargs)

    wrapper._labkit_probe = True  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)
    return True


def install_probe(folder: str | os.PathLike | None = None) -> list[str]:
    """Wrap the stages above that this process's vLLM has (``folder``: default ``$LABKIT_VLLM_HANDOVER``);
    the names of the stages wrapped. Idempotent."""
    folder = folder if folder is not None else os.environ.get(ENV_VAR, "").strip()
    if not folder:
        return []
    log = _Log(Path(folder))
    done: list[str] = []
    try:
        from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat

        if "api_entry" not in _installed and _wrap(OpenAIServingChat, "create_chat_completion", log, "api_entry"):
            done.append("api_entry")
    except ImportError:  # an older layout: the stage is not probed
        pass
    try:
        from vllm.renderers.base import BaseRenderer

        if "render_start" not in _installed and _wrap(BaseRenderer, "render_chat_async", log, "render_start"):
            done.append("render_start")
    except ImportError:
        pass
    try:
        from vllm.v1.engine.core_client import AsyncMPClient

        if "api_send" not in _installed and _wrap(AsyncMPClient, "add_request_async", log, "api_send",
                                                  with_request=True):
            done.append("api_send")
    except ImportError:
        pass
    try:
        from vllm.v1.engine.core import EngineCore

        if "engine_add" not in _installed and _wrap(EngineCore, "add_request", log, "engine_add",
                                                    with_request=True):
            done.append("engine_add")
    except ImportError:
        pass
    _installed.update(done)
    if done:
        logger.warning("labkit handover probe: %s in process %d -> %s", ", ".join(done), os.getpid(), log.path)
    return done
