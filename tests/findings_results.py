"""Small hand-made result files for the findings tests: one per method, with figures worked by hand.

``write_five(store)`` records the five results the lab answers from today; ``write_serve_sim`` the
sixth. Every figure below is chosen so the expected answer is a round number:

- ``engine`` (simulated, ``cpu-a``): under full graphs tensor 1000 tok/s, list 1250 -> 1.25x;
  host step before 4 + 1 + 2 + 1 = 8 ms under a 10 ms device step;
- ``engine`` (measured-gpu, ``gpu-a``): eager tensor 500 tok/s, list 1500 -> 3.00x;
- ``vllm_ab`` (measured-cpu, ``cpu-a``): baseline mean TPOT 40 and 44 ms (median 42), merged 21 ms
  -> 2.00x; output 100 -> 150 tok/s -> 1.50x;
- ``engine_vllm_host`` (``cpu-b``): full graphs, async: baseline 1000 tok/s, pr40143 1600 -> 1.60x;
  ``engine_vllm_host_off_host``: baseline 1000, pr40143 1100 -> 1.10x;
- ``mm_overlap`` (``cpu-a``): explained fraction 0.25.
"""

from __future__ import annotations

from labkit.results import make_result, save_result

CPU_A = {"slug": "cpu-a", "device": "cpu", "cpu_model": "Test CPU A", "cpu_cores": 2, "gpu_name": None}
CPU_B = {"slug": "cpu-b", "device": "cpu", "cpu_model": "Test CPU B", "cpu_cores": 4, "gpu_name": None}
GPU_A = {"slug": "gpu-a", "device": "cuda", "cpu_model": "Host", "cpu_cores": 16, "gpu_name": "Test GPU"}


def record(store, name: str, rows: list[dict], *, machine: dict, source: str, params: dict | None = None,
           size: str = "full", created: str = "2026-12-01T00:00:00+00:00", commit: str = "0123456789ab"):
    result = make_result(name if size == "full" else f"{name}_quick", rows, params=params or {}, source=source,
                         machine=dict(machine), size=size)
    result.labkit_commit = commit
    result.created = created
    return save_result(result, store)


def engine_row(placeholder: str, mode: str, tok_s: float, *, idle: float = 0.1, schedule_ms: float = 4.0) -> dict:
    variant = f"{placeholder}/loop/none/async" + ("" if mode == "none" else f"/{mode}")
    return {"variant": variant, "cudagraph": mode, "tokens_per_s_median": tok_s, "median_ns": 12e6,
            "device_idle_frac": idle, "device_busy_per_step_ns": 10e6, "host_schedule_ns": schedule_ms * 1e6,
            "host_prepare_ns": 1e6, "host_forward_ns": 2e6, "host_sample_ns": 1e6, "source": "simulated"}


def host_rows(before_tok_s: float, after_tok_s: float) -> list[dict]:
    """``engine_vllm_host`` rows: full graphs with async scheduling (and a distractor without)."""
    rows = []
    for is_async, scale in ((True, 1.0), (False, 0.5)):
        for variant, tok_s in (("baseline", before_tok_s), ("pr40143", after_tok_s), ("merged", after_tok_s)):
            rows.append({"cudagraph": "full", "async_scheduling": is_async, "vllm_variant": variant,
                         "cpu_speed_factor": 1.0, "tokens_per_s_median": tok_s * scale,
                         "tpot_mean_ms": 128e3 / (tok_s * scale), "device_idle_frac": 0.0})
    return rows


def write_five(store) -> None:
    record(store, "engine", [engine_row("tensor", "full", 1000.0), engine_row("list", "full", 1250.0),
                             engine_row("tensor", "none", 400.0), engine_row("list", "none", 800.0)],
           machine=CPU_A, source="simulated", params={"profile": "h200"})
    record(store, "engine", [engine_row("tensor", "none", 500.0, idle=0.8),
                             engine_row("list", "none", 1500.0, idle=0.4)],
           machine=GPU_A, source="measured-gpu", size="quick")
    record(store, "vllm_ab", [
        {"variant": "baseline", "repeat": 0, "mean_tpot_us": 40e3, "output_throughput_tok_s": 100.0},
        {"variant": "baseline", "repeat": 1, "mean_tpot_us": 44e3, "output_throughput_tok_s": 100.0},
        {"variant": "merged", "repeat": 0, "mean_tpot_us": 21e3, "output_throughput_tok_s": 150.0},
        {"variant": "merged", "repeat": 1, "mean_tpot_us": 21e3, "output_throughput_tok_s": 150.0},
    ], machine=CPU_A, source="measured-cpu", params={"vllm_version": "0.32.0"})
    record(store, "engine_vllm_host", host_rows(1000.0, 1600.0), machine=CPU_B, source="simulated",
           params={"profile": "h200"})
    record(store, "engine_vllm_host_off_host", host_rows(1000.0, 1100.0), machine=CPU_B, source="simulated",
           params={"profile": "h200"})
    record(store, "mm_overlap", [
        {"case": "measured", "explained_fraction": 0.25, "host_saving_ms": 2.0, "published_tpot_saving_ms": 8.0,
         "predicted_throughput_gain": 1.05},
        {"case": "scale that explains it all", "explained_fraction": 1.0, "host_saving_ms": 8.0,
         "published_tpot_saving_ms": 8.0, "predicted_throughput_gain": 1.3},
    ], machine=CPU_A, source="simulated")


def write_serve_sim(store, extra_gpu: str | None = None) -> None:
    """``serve_sim``: before 1000 tok/s predicted, after 1200 -> 1.20x output tok/s on the h200;
    ``extra_gpu``: a second GPU's rows after it (before 1000, after 2000), the result naming h200."""
    rows = []
    for gpu, after in (("h200", 1200.0),) + (((extra_gpu, 2000.0),) if extra_gpu else ()):
        for arm, tok_s, tpot in (("baseline", 1000.0, 30.0), ("pr40143", after, 25.0)):
            rows.append({"arm": arm, "gpu": gpu, "metric": "output_throughput", "predicted": tok_s,
                         "published": tok_s * 1.1, "error": -0.09})
            rows.append({"arm": arm, "gpu": gpu, "metric": "mean_tpot_ms", "predicted": tpot,
                         "published": tpot * 0.9, "error": 0.11})
    params = {"gpu": ["h200", extra_gpu]} if extra_gpu else {"gpu": "h200"}
    record(store, "serve_sim", rows, machine=CPU_A, source="simulated", params=params)
