"""vLLM's own server timed per request and per step: result ``vllm_serve_timeline``.

More: docs/reference.md, ``labkit.vllm.server.timeline``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from labkit.errors import UsageError
from labkit.results import VLLM_SERVE_TIMELINE, find_all, make_result, save_result

_ITERATION = re.compile(
    r"INFO (?P<date>\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d).*?Iteration\((?P<iteration>\d+)\): (?P<ctx_requests>\d+) context "
    r"requests, (?P<ctx_tokens>\d+) context tokens, (?P<gen_requests>\d+) generation requests, (?P<gen_tokens>\d+) "
    r"generation tokens, iteration elapsed time: (?P<elapsed_ms>[\d.]+) ms(?P<dummy> \(dummy\))?"
    r"(?:.*encoder inputs: (?P<encoder_inputs>\d+), encoder output embeddings: (?P<encoder_tokens>\d+))?")
_SETTINGS = re.compile(r"non-default args: (\{.*\})\s*$")
#: what ``vllm bench serve`` itself reported for the run, kept per run
REPORTED = ("duration", "completed", "total_output_tokens", "output_throughput", "max_output_tokens_per_s",
            "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms")
#: the shape and arm that key a run's rows
RUN_KEYS = ("variant", "num_prompts", "images", "image_size", "output_len", "repeat")


def request_rows(bench: dict) -> list[dict]:
    """One row per completed request of a ``--save-detailed`` bench result (seconds from the first send)."""
    missing = [k for k in ("start_times", "ttfts", "itls", "latencies") if not isinstance(bench.get(k), list)]
    if missing:
        raise UsageError(f"the bench file has no per-request {', '.join(missing)}: run `vllm bench serve` "
                         "with --save-detailed")
    t0 = min(bench["start_times"])
    errors = bench.get("errors") or [""] * len(bench["start_times"])
    lens = bench.get("output_lens") or [None] * len(bench["start_times"])
    return [{"kind": "request", "request": i, "sent_s": start - t0, "first_token_s": start - t0 + ttft,
             "finish_s": start - t0 + latency, "output_tokens": n if n else len(itls) + 1,
             "itl_ms": [round(x * 1e3, 3) for x in itls]}
            for i, (start, ttft, itls, latency, error, n) in enumerate(
                zip(bench["start_times"], bench["ttfts"], bench["itls"], bench["latencies"], errors, lens))
            if not error and ttft]


def step_rows(log_text: str) -> list[dict]:
    """One row per engine step the server logged (``--enable-logging-iteration-details``), dummy steps left out."""
    return [{"kind": "step", "iteration": int(m["iteration"]), "log_time": m["time"],
             **{k: int(m[k]) for k in ("ctx_requests", "ctx_tokens", "gen_requests", "gen_tokens")},
             "encoder_inputs": int(m["encoder_inputs"] or 0), "encoder_tokens": int(m["encoder_tokens"] or 0),
             "elapsed_ms": float(m["elapsed_ms"])} for m in _ITERATION.finditer(log_text) if not m["dummy"]]


def _jsonl(folder: Path, side: str) -> list[dict]:
    out = []
    for path in sorted(folder.glob(f"{side}-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                raise UsageError(f"{path} is not the timers' JSON lines: {line[:60]!r}") from None
    return out


def intake_rows(folder: str | Path, t0: float) -> list[dict]:
    """One row per request the API server's timers recorded, in seconds from ``t0`` (same clock)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"no timers folder {folder}: run the server with $LABKIT_SERVE_TIMERS set")
    rows = []
    for r in _jsonl(folder, "api"):
        media, proc = r.get("media") or [], r.get("processor") or []
        if not all(k in r for k in ("handover_s", "first_output_s", "finish_s")) or not proc:
            continue  # a request that failed before reaching the engine
        row = {"kind": "intake", "server_request": r["id"], "handler_s": r["handler_s"] - t0, "images": len(media),
               "processor_queued_s": proc[0][0] - t0, "processor_start_s": proc[0][1] - t0,
               "processor_end_s": proc[-1][2] - t0, "handover_s": r["handover_s"] - t0,
               "first_output_s": r["first_output_s"] - t0, "finish_s": r["finish_s"] - t0}
        if media:
            row.update(media_queued_s=min(m[0] for m in media) - t0, media_start_s=min(m[1] for m in media) - t0,
                       media_end_s=max(m[2] for m in media) - t0,
                       media_busy_ms=round(sum(m[2] - m[1] for m in media) * 1e3, 3))
        rows.append(row)
    return sorted(rows, key=lambda r: r["handover_s"])


def step_clock(steps: list[dict], folder: str | Path, t0: float) -> None:
    """Set each logged step's ``start_s`` (its ``schedule`` began) and ``end_s`` (its
    ``update_from_output`` ended), seconds from ``t0``, and ``host_ms`` (the two calls' own time),
    from the engine core's timers, matched in order (both count the steps that scheduled tokens)."""
    core = _jsonl(Path(folder), "core")
    if len(core) != len(steps):
        raise UsageError(f"the engine core's timers hold {len(core)} steps, its log {len(steps)}: not one run")
    for step, c in zip(steps, core):
        if c["tokens"] != step["ctx_tokens"] + step["gen_tokens"]:
            raise UsageError(f"step {step['iteration']}: the timers scheduled {c['tokens']} tokens, the log says "
                             f"{step['ctx_tokens'] + step['gen_tokens']}")
        (s0, s1), (u0, u1) = c["schedule_s"], c["update_s"]
        step.update(start_s=s0 - t0, end_s=u1 - t0, host_ms=round((s1 - s0 + u1 - u0) * 1e3, 3))


def engine_settings(log_text: str) -> dict:
    """The arguments the server ran with that differ from vLLM's defaults, as its log states them."""
    for line in log_text.splitlines():
        m = _SETTINGS.search(line)
        if m:
            try:
                return {k: v for k, v in ast.literal_eval(m.group(1)).items() if k not in ("model_tag", "host", "port")}
            except (ValueError, SyntaxError):
                return {}
    return {}


def ingest_timeline(bench: dict, server_log: str | Path, *, variant: str, shape: dict, repeat: int | None,
                    machine: dict, vllm_version: str | None, timers: str | Path | None = None,
                    results_root=None) -> Path:
    """File one run's requests and steps under ``vllm_serve_timeline`` (rows of the same arm, shape and
    repeat replaced; the others kept). ``shape``: ``num_prompts``, ``images``, ``image_size``, ``output_len``."""
    try:
        log = Path(server_log).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read the server log {server_log}: {exc}") from None
    steps = step_rows(log)
    if not steps:
        raise UsageError(f"no engine steps in {server_log}: serve with --enable-logging-iteration-details")
    run = dict(shape, variant=variant, repeat=repeat)
    requests = request_rows(bench)
    intake = []
    if timers is not None:
        t0 = min(bench["start_times"])
        intake = intake_rows(timers, t0)
        step_clock(steps, timers, t0)
    rows = [dict(r, **run) for r in requests + intake + steps]
    settings = {f"{variant}/{_run_label(run)}": engine_settings(log)}
    reported = {f"{variant}/{_run_label(run)}": {k: bench.get(k) for k in REPORTED}}
    previous = next(iter(find_all(VLLM_SERVE_TIMELINE, machine=machine["slug"], root=results_root)), None)
    kept = [r for r in (previous.rows if previous else []) if tuple(r.get(k) for k in RUN_KEYS) != tuple(
        run.get(k) for k in RUN_KEYS)]
    params = {"vllm_version": vllm_version, "device": machine.get("device"),
              "engine_settings": {**((previous.params.get("engine_settings") or {}) if previous else {}), **settings},
              "reported": {**((previous.params.get("reported") or {}) if previous else {}), **reported},
              "clock": "seconds from the run's first send, one monotonic clock for the client (requests), the API "
                       "server's timers (intake) and the engine core's (steps' start_s / end_s); elapsed_ms: vLLM's "
                       "own per-iteration time", "media_threads": _media_threads(log)}
    result = make_result(VLLM_SERVE_TIMELINE, kept + rows, params=params,
                         source="measured-cpu" if machine.get("device") == "cpu" else "measured-gpu", machine=machine)
    return save_result(result, root=results_root)


def _media_threads(log: str) -> int:
    m = re.search(r"VLLM_MEDIA_LOADING_THREAD_COUNT['\"]?[:=]\s*['\"]?(\d+)", log)
    return int(m.group(1)) if m else 8  # vLLM's default (vllm/envs.py)


def _run_label(run: dict) -> str:
    return f"{run.get('num_prompts')}x{run.get('images')}x{run.get('image_size')}/out{run.get('output_len')}/r{run.get('repeat')}"
