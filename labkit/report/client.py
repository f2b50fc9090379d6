"""The notebook client the report runs: nbclient's, unable to sit on a reply the kernel already sent.

More: docs/reference.md, ``labkit.report.client``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from queue import Empty
from typing import Callable

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.jsonutil import json_clean
from nbclient.output_widget import OutputWidget
from nbclient.util import run_sync
from traitlets import Type

from labkit.errors import ReportStopped

logger = logging.getLogger(__name__)

#: signals that stop a report run (SIGINT is Ctrl-C)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class WatchfulShellChannel(AsyncZMQSocketChannel):
    """A shell channel whose ``get_msg`` also returns when a ready message's wakeup was lost."""

    check_interval_s: float = 0.25
    grace_s: float = 1.0
    idle_since: Callable[[], float | None] = staticmethod(lambda: None)
    on_stall: Callable[[float], None] | None = None

    async def _ready_now(self) -> bool:
        """Is a message waiting in the socket? (a zero-timeout check; it never blocks)"""
        return bool(await self.socket.poll(0))

    async def get_msg(self, timeout: float | None = None) -> dict:  # type: ignore[override]
        """The next message; ``queue.Empty`` after ``timeout`` seconds (None: no limit)."""
        start = time.monotonic()
        poll = asyncio.ensure_future(self.socket.poll(None if timeout is None else int(timeout * 1000)))
        try:
            while True:
                done, _ = await asyncio.wait({poll}, timeout=self.check_interval_s)
                if done:
                    if poll.result():
                        return await self._recv()
                    raise Empty
                idle = self.idle_since()
                if idle is None or time.monotonic() - idle < self.grace_s:
                    continue
                if await self._ready_now():
                    poll.cancel()
                    waited = time.monotonic() - start
                    logger.warning("shell message ready but not delivered after %.1f s: reading it now", waited)
                    if self.on_stall is not None:
                        self.on_stall(waited)
                    return await self._recv()
        finally:
            if not poll.done():
                poll.cancel()


class WatchfulKernelClient(AsyncKernelClient):
    """The asyncio kernel client with a :class:`WatchfulShellChannel`."""

    shell_channel_class = Type(WatchfulShellChannel)  # type: ignore[assignment]


class WatchfulKernelManager(AsyncKernelManager):
    """The asyncio kernel manager whose clients are :class:`WatchfulKernelClient`."""

    client_factory = Type(WatchfulKernelClient)  # type: ignore[assignment]


class SyncedOutputWidget(OutputWidget):
    """nbclient's Output-widget mimic, sending its state back through the asyncio socket (which wakes a reply poll)."""

    def _publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys) -> None:
        content = json_clean(dict(data=data or {}, comm_id=self.comm_id, **keys))
        session = self.kernel_client.session
        msg = session.msg(msg_type, content=content, parent=self.parent_header, metadata=metadata or {})
        channel = self.kernel_client.shell_channel
        if isinstance(channel, AsyncZMQSocketChannel):  # its socket is a zmq.asyncio one
            channel.socket.send_multipart(session.serialize(msg))
        else:
            channel.send(msg)


class ReportClient(NotebookClient):
    """nbclient's ``NotebookClient`` for the report: watchful reply waits, synced Output widgets, stop on signals."""

    def __init__(self, nb, km=None, *, on_stall: Callable[[int, float], None] | None = None, **kw):
        kw.setdefault("kernel_manager_class", WatchfulKernelManager)
        super().__init__(nb, km=km, **kw)
        self.widget_registry = {
            **self.widget_registry,
            "@jupyter-widgets/output": {"OutputModel": SyncedOutputWidget},
        }
        self.report_on_stall = on_stall
        self.stalls: list[tuple[int, float]] = []
        self.stopped_by: int | None = None
        self._idle_at: float | None = None
        self._cell_index: int | None = None
        self._run_task: asyncio.Task | None = None

    # -- the watch: when did the kernel go idle for the cell being awaited --------------
    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        self._idle_at = None
        self._cell_index = cell_index
        return await super().async_execute_cell(cell, cell_index, execution_count, store_history)

    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index) -> None:
        await super()._async_poll_output_msg(parent_msg_id, cell, cell_index)
        self._idle_at = time.monotonic()  # status: idle seen for this cell

    def _stalled(self, waited: float) -> None:
        index = self._cell_index if self._cell_index is not None else -1
        self.stalls.append((index, waited))
        if self.report_on_stall is not None:
            self.report_on_stall(index, waited)

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        channel = kc.shell_channel
        if isinstance(channel, WatchfulShellChannel):
            channel.idle_since = lambda: self._idle_at
            channel.on_stall = self._stalled
        self._install_stop_handlers()
        return kc

    # -- stopping on a signal ----------------------------------------------------------
    def _install_stop_handlers(self) -> None:
        """Replace nbclient's loop signal handlers (installed just before) with ours."""
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            try:
                loop.add_signal_handler(signum, self._stop, signum)
            except (RuntimeError, ValueError, NotImplementedError):  # not the main thread
                pass

    def _stop(self, signum: int) -> None:
        if self.stopped_by is None:
            self.stopped_by = signum
            logger.info("stopping on %s", signal.Signals(signum).name)
            if self._run_task is not None:
                self._run_task.cancel()

    async def async_execute(self, reset_kc: bool = False, **kwargs):
        self._run_task = asyncio.current_task()
        try:
            return await super().async_execute(reset_kc=reset_kc, **kwargs)
        except BaseException:
            # nbclient turns the cancellation into DeadKernelError: whatever surfaces, a
            # signal received means the run was stopped
            if self.stopped_by is not None:
                raise ReportStopped(self.stopped_by) from None
            raise
        finally:
            self._run_task = None

    execute = run_sync(async_execute)
