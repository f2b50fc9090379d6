"""The report's notebook client: a reply whose socket wakeup was lost is still read (and
reported), the Output widget's sync no longer loses the wakeup, SIGTERM stops a run.

The lost wakeup is produced deterministically on real zmq sockets: either the asyncio
reader of the client socket is removed (nothing can wake a pending poll any more), or
the exact sequence of the bug is replayed (a reply arrives, then the Output widget
sends on the same socket before the event loop runs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import select
import signal
import subprocess
import sys
import time
from queue import Empty
from types import SimpleNamespace

import pytest

zmq = pytest.importorskip("zmq")
pytest.importorskip("nbclient")

from jupyter_client.session import Session  # noqa: E402
from nbclient.output_widget import OutputWidget  # noqa: E402

from labkit.report.client import SyncedOutputWidget, WatchfulShellChannel  # noqa: E402
from tests.report_helpers import write_notebook  # noqa: E402


class Pair:
    """A client DEALER (asyncio) connected to a kernel-side ROUTER (blocking), over inproc."""

    def __init__(self, name: str):
        self.ctx = zmq.asyncio.Context()
        self.kernel = zmq.Context.shadow(self.ctx.underlying).socket(zmq.ROUTER)
        self.kernel.bind(f"inproc://{name}")
        self.client = self.ctx.socket(zmq.DEALER)
        self.client.connect(f"inproc://{name}")
        self.session = Session(key=b"")
        self.channel = WatchfulShellChannel(self.client, self.session)

    def reply(self, ident: bytes, text: str = "reply") -> None:
        """The kernel answers on its socket (from outside the event loop)."""
        self.session.send(self.kernel, "execute_reply", content={"status": "ok", "text": text}, ident=ident)

    def close(self) -> None:
        self.client.close(0)
        self.kernel.close(0)
        self.ctx.term()


async def _handshake(pair: Pair) -> bytes:
    """Client sends a request; return the kernel's routing id for it. A first short wait
    registers the client socket's descriptor with the running loop."""
    pair.session.send(pair.client, "execute_request", content={"code": ""})
    parts = pair.kernel.recv_multipart()
    assert not await pair.client.poll(10)
    return parts[0]


async def _reply_while_waiting(pair: Pair, ident: bytes, text: str, timeout: float):
    """Start ``get_msg(timeout)``, let it wait, then have the kernel reply; return the message."""
    task = asyncio.ensure_future(pair.channel.get_msg(timeout=timeout))
    await asyncio.sleep(0.1)
    assert not task.done()
    pair.reply(ident, text)
    return await asyncio.wait_for(task, 60)


def _run(coro):
    """Run ``coro`` on a fresh loop in its own thread: a session fixture (Playwright's sync API)
    may already run a loop in this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def test_watch_reads_a_ready_reply_whose_wakeup_was_lost():
    async def scenario():
        pair = Pair("lost")
        try:
            ident = await _handshake(pair)
            asyncio.get_running_loop().remove_reader(pair.client.FD)  # the wakeup can never arrive
            stalls = []
            pair.channel.idle_since = lambda: time.monotonic() - 5.0  # the kernel went idle long ago
            pair.channel.on_stall = stalls.append
            # a long timeout: only the watch can return this before it runs out
            msg = await _reply_while_waiting(pair, ident, "late", timeout=600)
            return msg, stalls
        finally:
            pair.close()

    msg, stalls = _run(scenario())
    assert msg["content"]["text"] == "late"
    assert len(stalls) == 1 and stalls[0] >= 0


def test_watch_waits_while_the_kernel_is_busy_and_reports_nothing_normal():
    async def scenario():
        pair = Pair("busy")
        try:
            ident = await _handshake(pair)
            stalls = []
            pair.channel.on_stall = stalls.append
            # busy kernel (idle_since() is None), nothing sent: the timeout runs out
            with pytest.raises(Empty):
                await pair.channel.get_msg(timeout=0.6)
            # a normal reply, kernel idle: delivered by the wakeup, not reported
            pair.channel.idle_since = lambda: time.monotonic() - 5.0
            normal = await _reply_while_waiting(pair, ident, "on time", timeout=600)
            # lost wakeup while the kernel is still busy: not the watch's business; the
            # timeout's final check still finds the message
            pair.channel.idle_since = lambda: None
            asyncio.get_running_loop().remove_reader(pair.client.FD)
            late = await _reply_while_waiting(pair, ident, "found at timeout", timeout=0.6)
            return normal, late, stalls
        finally:
            pair.close()

    normal, late, stalls = _run(scenario())
    assert normal["content"]["text"] == "on time"
    assert late["content"]["text"] == "found at timeout"
    assert stalls == []


def _replay_output_widget_sync(widget_class) -> bool:
    """The bug's sequence: the client waits for a reply; the reply arrives; before the loop
    runs, the Output widget mimic syncs its state on the same socket. True if the pending
    wait was woken (within 3 s of loop time; the reply sits in the socket either way)."""

    async def scenario():
        pair = Pair(f"sync-{widget_class.__name__}")
        try:
            ident = await _handshake(pair)
            waiting = asyncio.ensure_future(pair.client.poll(600_000))  # nbclient's reply poll
            await asyncio.sleep(0.05)
            assert not waiting.done()
            pair.reply(ident)
            # the reply's signal reaches the client socket's descriptor
            assert select.select([pair.client.FD], [], [], 10)[0]
            time.sleep(0.05)  # libzmq processes pending commands on a send only every ~1 ms
            kc = SimpleNamespace(session=pair.session, shell_channel=pair.channel)
            widget = widget_class("comm-1", {"outputs": []}, kc, SimpleNamespace())
            widget.parent_header = {}
            widget.sync_state()  # runs synchronously, as inside nbclient's IOPub handler
            done, _ = await asyncio.wait({waiting}, timeout=3)
            woken = bool(done)
            ready = bool(await pair.client.poll(0))
            waiting.cancel()
            return woken, ready
        finally:
            pair.close()

    woken, ready = _run(scenario())
    assert ready  # the reply is there in both cases
    return woken


def test_synced_output_widget_wakes_the_pending_reply_wait():
    assert _replay_output_widget_sync(SyncedOutputWidget)


def test_nbclient_output_widget_loses_the_wakeup():
    """The cause, shown: nbclient's widget sends through jupyter_client's blocking shadow
    socket, which consumes the reply's signal without waking the asyncio wait."""
    assert not _replay_output_widget_sync(OutputWidget)


@pytest.mark.slow
def test_report_says_so_when_a_reply_is_not_delivered(tmp_path, monkeypatch):
    """A real kernel and a client that can never be woken for shell replies: every cell
    still completes, long before the cell timeout, and the progress log says so."""
    from labkit.report import build, client

    original = client.ReportClient.async_start_new_kernel_client

    async def deaf(self):
        kc = await original(self)
        asyncio.get_running_loop().remove_reader(kc.shell_channel.socket.FD)
        return kc

    monkeypatch.setattr(client.ReportClient, "async_start_new_kernel_client", deaf)
    # the two cells sleep, so their replies cannot be in the socket yet when the wait begins,
    # however loaded the machine is
    write_notebook(tmp_path, "00_deaf", "Deaf client", ["import time\ntime.sleep(1.5)\nx = 1",
                                                         "time.sleep(1.5)\nprint(x + 1)"])
    lines: list[str] = []
    runs = build.build_report(tmp_path / "out", notebooks_dir=tmp_path, device="cpu", timeout=600,
                              log=lines.append, save=False)
    assert runs[0].ok, runs[0].error
    # four code cells (parameters, injected parameters, two sleeping cells): each reply waits for
    # the watch, unless it was already in the socket when the wait began (not so for the sleepers)
    assert runs[0].stalled_replies >= 2
    stall_lines = [line for line in lines if "not delivered" in line]
    assert len(stall_lines) == runs[0].stalled_replies
    assert all(line.startswith("[1/1] 00_deaf: cell ") and "\n" not in line for line in stall_lines)


def _sigterm_once(proc, marker, timeout_s: float, never: str):
    """Wait (up to ``timeout_s``) for a cell to create ``marker``, then SIGTERM the report and
    return its ``(stdout, stderr)``; a report that stays up after 60 s more is killed."""
    try:
        deadline = time.monotonic() + timeout_s
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, never
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=60)  # well before the sleeping cell's 120 s end
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_sigterm_stops_the_report_like_ctrl_c(tmp_path):
    marker = tmp_path / "started"
    write_notebook(tmp_path, "00_sleepy", "Sleepy", [
        f"open({str(marker)!r}, 'w').close()\nimport time\ntime.sleep(120)",
        "print('never')",
    ])
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "labkit", "report", "--notebooks", str(tmp_path), "--out", str(out),
         "--device", "cpu", "--no-save"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _stdout, stderr = _sigterm_once(proc, marker, 120, "the notebook never started")
    assert proc.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in stderr
    stopped = [line for line in stderr.splitlines() if line.startswith("report: stopped by SIGTERM")]
    assert len(stopped) == 1
    assert not (out / "00_sleepy.html").exists()  # no half-run page


@pytest.mark.slow
def test_a_report_stopped_part_way_records_the_notebooks_it_finished(tmp_path):
    """SIGTERM during the second notebook: the results store holds the first one's row, marked
    partial; without the save after each notebook it would hold nothing."""
    marker = tmp_path / "started"
    write_notebook(tmp_path, "00_quick", "Quick", ["x = 1"])
    write_notebook(tmp_path, "01_sleepy", "Sleepy", [
        f"open({str(marker)!r}, 'w').close()\nimport time\ntime.sleep(120)",
    ])
    store = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "labkit", "report", "--notebooks", str(tmp_path), "--out", str(tmp_path / "out"),
         "--device", "cpu"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, LABKIT_RESULTS=str(store)),
    )
    _sigterm_once(proc, marker, 180, "the second notebook never started")
    assert proc.returncode == 128 + signal.SIGTERM
    saved = list(store.glob("*/report_quick.json"))
    assert len(saved) == 1, list(store.rglob("*"))
    data = json.loads(saved[0].read_text())
    assert data["complete"] is False
    assert [(r["notebook"], r["status"]) for r in data["rows"]] == [("00_quick", "ok")]
