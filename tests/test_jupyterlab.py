"""``make lab``'s server: token-protected on 127.0.0.1, and a notebook runs in one of its kernels.

The server is started through ``scripts/lab.sh`` (what ``make lab`` runs) on a free port,
rooted at a temporary copy of the environment notebook; the notebook's code cells are sent
to a kernel of that server over its websocket channel, as JupyterLab itself does.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    nbdir = root / "notebooks"
    nbdir.mkdir()
    shutil.copy(REPO / "notebooks" / "00_environment.py", nbdir)
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, LAB_ROOT=str(nbdir), LAB_PORT=str(port), LAB_TOKEN=token,
               VENV=str(REPO / ".venv"), LABKIT_RESULTS=str(root / "results"), JUPYTER_RUNTIME_DIR=str(root / "rt"))
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / "lab.sh")], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited: {(root / 'lab.log').read_text()[-2000:]}")
            try:
                if _get(f"{base}/api/status", token) == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"jupyter lab did not answer: {(root / 'lab.log').read_text()[-2000:]}")
        yield {"base": base, "port": port, "token": token, "nbdir": nbdir, "log": root / "lab.log", "pid": proc.pid}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_status_needs_the_token(lab):
    assert _get(f"{lab['base']}/api/status", lab["token"]) == 200
    assert _get(f"{lab['base']}/api/status") == 403
    assert _get(f"{lab['base']}/api/status", "wrong-token") == 403


def test_token_stays_off_the_command_line(lab):
    """Any user can read a process's arguments; its environment only the user (and root) can."""
    proc = Path(f"/proc/{lab['pid']}")  # lab.sh execs the server: same process
    cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
    assert "jupyter" in cmdline and lab["token"] not in cmdline
    environ = proc / "environ"
    assert f"JUPYTER_TOKEN={lab['token']}".encode() in environ.read_bytes().split(b"\0")
    assert environ.stat().st_mode & 0o077 == 0  # no access for group or others


def test_listens_on_loopback_and_prints_url(lab):
    text = lab["log"].read_text()
    assert f"http://127.0.0.1:{lab['port']}/lab?token={lab['token']}" in text
    assert (lab["nbdir"] / "00_environment.ipynb").is_file()  # built from the .py


def _msg(session: str, code: str) -> dict:
    return {
        "header": {"msg_id": uuid.uuid4().hex, "username": "test", "session": session,
                   "msg_type": "execute_request", "version": "5.3",
                   "date": _dt.datetime.now(_dt.timezone.utc).isoformat()},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    }


def _run_cell(ws, session: str, code: str, timeout: float = 120) -> tuple[str, list[str], list[str]]:
    """Execute ``code``; return (status, stream texts, errors)."""
    msg = _msg(session, code)
    ws.send(json.dumps(msg))
    streams, errors, status = [], [], None
    idle = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (status and idle):
        reply = json.loads(ws.recv())
        if reply.get("parent_header", {}).get("msg_id") != msg["header"]["msg_id"]:
            continue
        kind = reply["header"]["msg_type"]
        if kind == "stream":
            streams.append(reply["content"]["text"])
        elif kind == "error":
            errors.append(f"{reply['content']['ename']}: {reply['content']['evalue']}")
        elif kind == "execute_reply":
            status = reply["content"]["status"]
        elif kind == "status" and reply["content"]["execution_state"] == "idle":
            idle = True
    return status or "timeout", streams, errors


def test_notebook_runs_in_a_server_kernel(lab):
    import websocket

    # a session for the notebook, as JupyterLab opens one: its kernel runs in the notebook's folder
    body = {"path": "00_environment.ipynb", "type": "notebook", "name": "00_environment.ipynb",
            "kernel": {"name": "python3"}}
    req = urllib.request.Request(
        f"{lab['base']}/api/sessions", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"token {lab['token']}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        kernel = json.loads(resp.read())["kernel"]
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{lab['port']}/api/kernels/{kernel['id']}/channels?token={lab['token']}", timeout=120
    )
    try:
        nb = nbformat.read(lab["nbdir"] / "00_environment.ipynb", as_version=4)
        session = uuid.uuid4().hex
        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        assert len(code_cells) >= 4
        for cell in code_cells:
            status, _, errors = _run_cell(ws, session, cell.source)
            assert status == "ok", (cell.source[:80], errors)
        status, streams, _ = _run_cell(ws, session, "import os; print(os.getcwd()); print(here.path)")
        assert status == "ok"
        cwd, saved = "".join(streams).split()
        assert Path(cwd) == lab["nbdir"]  # the kernel runs in the notebooks folder
        assert Path(saved).is_file() and Path(saved).name == "calibration_quick.json"  # quick size
    finally:
        ws.close()
