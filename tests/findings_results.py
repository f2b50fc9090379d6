"""Small hand-made result files for the findings tests, with figures worked by hand.

``write_results(store)`` records what the answer and its five evidence rows read:

- ``calibration`` (``cpu-a``): a tensor read + int() 1,200 ns, a list read 8 ns -> 150x;
- ``vllm_step`` (``cpu-a``, full): at 128 x 32 with the forward off the host, the baseline's engine core
  runs 14 + 3 = 17 ms (``process_outputs`` 1 ms is the API server's, left out), pr40143's 6 + 3 = 9 ms:
  8.0 ms saved a step;
- ``vllm_ab`` (``cpu-a``): baseline mean TPOT 40 and 44 ms (median 42), merged 21 ms -> 2.00x;
- ``pr_table`` (``cpu-a``, full): pr40143's peak 9,600 tok/s on the h200 (+5.6% of 9,088) and 6,400 on
  the h100 (-29.6%); the PR host's tensor read inferred at 2.00 us (the lab: 1.00-4.00 us); the
  whole-run figures published, not predicted; its peak gain on the h200 9600 / 6272 = 1.531x (published
  9088 / 6158 = 1.476x), the whole-run gains published only (3146.8 / 2478.5 = 1.270x output tok/s,
  33.81 / 24.58 = 1.376x mean TPOT);
- ``vllm_serve_timeline`` (``cpu-a``): at 16 x 32, 64 out, the baseline's two requests finish at 10.0 and
  10.5 s (0.5 s apart), pr40143's at 4.0 and 10.0 s (6.0 s apart); at 8 x 4 only the baseline ran (one
  arm: no comparison). The published table's own arithmetic: the average request finished 4.8 s before
  the last (baseline: 413.16 - 137.9 - 7,999 x 33.81 ms; pr40143's 4.5 s).
"""

from __future__ import annotations

from labkit.results import make_result, save_result

CPU_A = {"slug": "cpu-a", "device": "cpu", "cpu_model": "Test CPU A", "cpu_cores": 2, "gpu_name": None}
#: (arm, gpu) -> metric -> (predicted or None, published or None, inferred)
PR_TABLE = {
    ("baseline", "h200"): {"peak_output_tok_s": (6272.0, 6158.0, "host"), "output_tok_s": (None, 2478.5, None),
                           "mean_tpot_ms": (None, 33.81, None), "mean_ttft_s": (None, 137.9, None),
                           "duration_s": (None, 413.16, None)},
    ("pr40143", "h200"): {"peak_output_tok_s": (9600.0, 9088.0, None), "output_tok_s": (None, 3146.8, None),
                          "mean_tpot_ms": (None, 24.58, None), "mean_ttft_s": (None, 124.3, None),
                          "duration_s": (None, 325.41, None)},
    ("baseline", "h100"): {"peak_output_tok_s": (6272.0, 6158.0, "host")},
    ("pr40143", "h100"): {"peak_output_tok_s": (6400.0, 9088.0, None)},
}


def record(store, name: str, rows: list[dict], *, machine: dict, source: str, params: dict | None = None,
           size: str = "full", created: str = "2026-12-01T00:00:00+00:00", commit: str = "0123456789ab"):
    result = make_result(name if size == "full" else f"{name}_quick", rows, params=params or {}, source=source,
                         machine=dict(machine), size=size)
    result.labkit_commit = commit
    result.created = created
    return save_result(result, store)


def _census_rows() -> list[dict]:
    phases = {"baseline": {"schedule": 14000.0, "prepare_inputs": 3000.0, "process_outputs": 1000.0},
              "pr40143": {"schedule": 6000.0, "prepare_inputs": 3000.0, "process_outputs": 1000.0}}
    rows = [{"variant": v, "num_requests": 128, "images": 32, "phase": f"off_host:{p}", "median_us": us}
            for v, ph in phases.items() for p, us in ph.items()]
    rows.append({"variant": "baseline", "num_requests": 128, "images": 32, "phase": "off_host:step", "median_us": 99e3})
    rows.append({"variant": "baseline", "num_requests": 8, "images": 32, "phase": "off_host:schedule", "median_us": 5.0})
    return rows


#: the h200's gains, worked by hand from PR_TABLE and the published table: (predicted or None, published)
GAINS = {"gain_output_tok_s": (None, 3146.8 / 2478.5), "gain_mean_tpot_ms": (None, 33.81 / 24.58),
         "gain_peak_output_tok_s": (9600.0 / 6272.0, 9088.0 / 6158.0)}


def pr_table_rows() -> list[dict]:
    rows = []
    for (arm, gpu), metrics in PR_TABLE.items():
        for metric, (pred, pub, inferred) in metrics.items():
            rows.append({"arm": arm, "gpu": gpu, "metric": metric, "unit": "", "predicted": pred, "published": pub,
                         "error": None if pred is None else (pred - pub) / pub, "inferred": inferred})
    rows += [{"arm": "pr40143/baseline", "gpu": "h200", "metric": m, "unit": "x", "predicted": pred, "published": pub,
              "error": None if pred is None else pred / pub - 1, "inferred": None} for m, (pred, pub) in GAINS.items()]
    return rows


def pr_table_params() -> dict:
    peaks = [{"gpu": g, "arm": a, "regime": "async", "device_ms": dev, "host_ms": host, "step_ms": max(dev, host),
              "bound": "host" if host > dev else "device", "peak_output_tok_s": PR_TABLE[(a, g)]["peak_output_tok_s"][0]}
             for g, dev in (("h200", 13.5), ("h100", 20.0)) for a, host in (("baseline", 20.79), ("pr40143", 6.0))]
    return {"gpu": "h200", "gpus": ["h200", "h100"], "arms": ["baseline", "pr40143"], "regime": "async",
            "peaks": peaks, "fitted": {},
            "inferred": {"read_ns": {"value": 2000.0, "from": "baseline peak",
                                     "lab_measured_ns": {"cpu-a": {"min": 1000.0, "max": 4000.0, "measurements": 3}}}}}


def write_results(store, *, without: tuple = ()) -> None:
    if "calibration" not in without:
        record(store, "calibration", [{"kind": "cpu", "variant": "tensor_index_int", "median_ns": 1200.0},
                                      {"kind": "cpu", "variant": "list_index", "median_ns": 8.0}],
               machine=CPU_A, source="measured-cpu")
    if "vllm_step" not in without:
        record(store, "vllm_step", _census_rows(), machine=CPU_A, source="measured-cpu")
    if "vllm_ab" not in without:
        record(store, "vllm_ab", [
            {"variant": "baseline", "repeat": 0, "mean_tpot_us": 40e3, "output_throughput_tok_s": 100.0},
            {"variant": "baseline", "repeat": 1, "mean_tpot_us": 44e3, "output_throughput_tok_s": 100.0},
            {"variant": "merged", "repeat": 0, "mean_tpot_us": 21e3, "output_throughput_tok_s": 150.0},
            {"variant": "merged", "repeat": 1, "mean_tpot_us": 21e3, "output_throughput_tok_s": 150.0},
        ], machine=CPU_A, source="measured-cpu", params={"vllm_version": "0.32.0", "shape": {
            "image_size": "64x64", "input_len": 16, "output_len": 128, "num_prompts": 128, "images": 32}})
    if "pr_table" not in without:
        record(store, "pr_table", pr_table_rows(), machine=CPU_A, source="simulated", params=pr_table_params())
    if "vllm_serve_timeline" not in without:
        shape = {"images": 32, "image_size": "1024x1536", "output_len": 64, "num_prompts": 16}
        tokens = {"first_token_s": 0.5, "itl_ms": [10.0]}
        rows = [{"kind": "request", "request": i, "variant": v, "finish_s": f, **tokens, **shape}
                for v, ends in (("baseline", (10.0, 10.5)), ("pr40143", (4.0, 10.0))) for i, f in enumerate(ends)]
        rows += [{"kind": "request", "request": i, "variant": "baseline", "finish_s": f, **tokens, "images": 4,
                  "image_size": "1024x1536", "output_len": 16, "num_prompts": 8} for i, f in enumerate((1.0, 30.0))]
        rows.append({"kind": "step", "variant": "baseline", "iteration": 0, "gen_requests": 0, "ctx_requests": 0,
                     **shape})
        record(store, "vllm_serve_timeline", rows, machine=CPU_A, source="measured-cpu")
