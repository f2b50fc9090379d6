"""Start a real ``vllm serve`` (vLLM's CPU build, a made model) and point ``vllm bench serve`` at it.

Shared by the runs that measure the real server (:mod:`labkit.vllm.server.handover`,
:mod:`labkit.vllm.server.serve_host`): the server runs through the A/B launcher
(``python -m labkit.vllm.ab run -- serve ...``) in a session of its own, so that stopping it stops
its engine core and worker too, even where the API server itself died (out of memory) and left
them behind; the client is ``vllm bench serve`` with the random-mm dataset #40143's benchmark
used (base64 JPEG images, every request sent at once, ``--ignore-eos``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from labkit.errors import UsageError

__all__ = ["SERVER_START_S", "free_port", "wait_healthy", "stop_group", "server_env", "serve_command",
           "bench_command"]

SERVER_START_S = 900


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen, log: Path) -> None:
    """Until ``/health`` answers; ``UsageError`` when the server exits or is not up in time."""
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UsageError(f"vllm serve exited early (code {proc.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise UsageError(f"vllm serve not healthy after {SERVER_START_S} s; see {log}")


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left after 60 s."""
    for sig, wait_s in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                proc.poll()
                return
            proc.poll()
            time.sleep(0.5)


def server_env(run_dir: Path, probes: dict) -> tuple[dict, dict]:
    """(the server's environment, the client's): vLLM's CPU-build settings, the run's own cache
    folder, and ``probes`` (variable -> value: the A/B variant, a probe's folder) for the server only."""
    from labkit.vllm.conformance.engine import ENGINE_ENV

    env = dict(os.environ)
    env.update({k: v for k, v in ENGINE_ENV.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"})
    env.update(VLLM_CPU_KVCACHE_SPACE="4", VLLM_RPC_TIMEOUT="1800000", VLLM_CACHE_ROOT=str(run_dir / "vllm-cache"))
    client = {k: v for k, v in env.items() if k not in probes}
    env.update(probes)
    return env, client


def serve_command(model_dir: Path, port: int, *, images: int, max_num_seqs: int, max_model_len: int,
                  processor_cache_gb: float, max_num_batched_tokens: int = 2048) -> list[str]:
    return [sys.executable, "-m", "labkit.vllm.ab", "run", "--", "serve", str(model_dir), "--host", "127.0.0.1",
            "--port", str(port), "--limit-mm-per-prompt", json.dumps({"image": images}), "--load-format", "dummy",
            "--dtype", "bfloat16", "--enforce-eager", "--no-enable-prefix-caching", "--max-num-seqs",
            str(max_num_seqs), "--mm-processor-cache-gb", str(processor_cache_gb),
            "--max-num-batched-tokens", str(max_num_batched_tokens), "--max-model-len", str(max_model_len)]


def bench_command(model_dir: Path, port: int, run_dir: Path, *, requests: int, images: int, width: int,
                  height: int, input_len: int, output_len: int) -> list[str]:
    """``vllm bench serve``: ``requests`` sent at once, each ``images`` random JPEGs of ``height x width``;
    its detailed JSON goes to ``run_dir/bench.json``."""
    return [sys.executable, "-m", "labkit.vllm.ab", "run", "--", "bench", "serve", "--backend", "openai-chat",
            "--endpoint", "/v1/chat/completions", "--base-url", f"http://127.0.0.1:{port}",
            "--model", str(model_dir), "--dataset-name", "random-mm", "--num-prompts", str(requests),
            "--max-concurrency", str(requests), "--random-mm-base-items-per-request", str(images),
            "--random-mm-num-mm-items-range-ratio", "0",
            "--random-mm-limit-mm-per-prompt", json.dumps({"image": images, "video": 0}),
            "--random-mm-bucket-config", f"{{({height}, {width}, 1): 1.0}}", "--random-input-len",
            str(input_len), "--random-output-len", str(output_len), "--ignore-eos", "--seed", "0",
            "--save-result", "--save-detailed", "--result-dir", str(run_dir), "--result-filename", "bench.json"]
