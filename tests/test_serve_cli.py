"""``labkit bench serve-sim``: its few options, its refusals (one line on stderr, exit 2, before any
work), its peaks worked by hand from the device model and a hand-made chain, and the full-size run's
inference of the PR host worked by hand over a hand-made results store."""

from __future__ import annotations

import argparse

import pytest

from labkit.cli import main
from labkit.serve.bench_serve_sim import add_cli_args


def test_few_options():
    p = argparse.ArgumentParser()
    add_cli_args(p)
    flags = {o for a in p._actions for o in a.option_strings} - {"-h", "--help", "--json", "--no-save", "-v",
                                                                  "--verbose"}
    workload = {"--num-prompts", "--random-mm-base-items-per-request", "--random-mm-bucket-config",
                "--random-input-len", "--random-output-len"}
    assert workload <= flags and len(flags - workload) <= 4
    assert flags - workload == {"--gpu", "--arms", "--regime", "--census-machine"}


def test_workload_defaults_are_the_published_run():
    from labkit.facts import PR40143
    from labkit.vllm.serving import WORKLOADS

    p = argparse.ArgumentParser()
    add_cli_args(p)
    a = p.parse_args([])
    w = WORKLOADS["full"]
    assert (a.num_prompts, a.random_mm_base_items_per_request, a.random_output_len) == (
        PR40143.requests, PR40143.images, PR40143.output_tokens) == (w.requests, w.images, w.output_tokens)
    from labkit.serve.bench_serve_sim import _bucket

    assert "x".join(map(str, _bucket(a.random_mm_bucket_config))) == PR40143.image_size


@pytest.mark.parametrize("argv, says", [(["--arms", "baseline,nope"], "arms"), (["--gpu", "a100"], "GPUs"),
                                        (["--regime", "overlapped"], "regime"),
                                        (["--random-mm-bucket-config", "{(64, 64, 1): 0.5, (32, 32, 1): 0.5}"],
                                         "one image bucket"),
                                        (["--num-prompts", "0"], "requests >= 1")])
def test_bad_input_exit_2(capsys, argv, says):
    assert main(["bench", "serve-sim", *argv, "--no-save"]) == 2
    assert says in capsys.readouterr().err


def test_peaks_by_regime_from_the_device_and_the_chain():
    from labkit.gpu.device_model import full_batch_device_ns
    from labkit.serve.bench_serve_sim import peak_rows
    from labkit.serve.host import Chains, Counts, UnitCosts
    from labkit.step_model import peak_tokens_per_s

    # a baseline chain of 20 ms and a pr40143 chain of 6 ms at 128 requests, on a host of 1 us / 5 ns
    units = UnitCosts(1000.0, 5.0, "hand")
    chains = Chains(32, {"baseline": [(128, Counts(14_000, 1.2e6, 0))], "pr40143": [(128, Counts(0, 1.2e6, 0))]})
    rows = peak_rows(chains, units, ["h200"], ["baseline", "pr40143"], requests=128, prompt_len=9408)
    dev = full_batch_device_ns("h200", 128, 9408)
    by = {(r["arm"], r["regime"]): r for r in rows}
    assert by[("baseline", "async")]["host_ms"] == pytest.approx(20.0)
    assert by[("baseline", "async")]["bound"] == "host" and by[("pr40143", "async")]["bound"] == "device"
    assert by[("pr40143", "async")]["step_ms"] == pytest.approx(dev / 1e6)
    assert by[("pr40143", "sync")]["step_ms"] == pytest.approx(dev / 1e6 + 6.0)
    assert by[("pr40143", "async")]["peak_output_tok_s"] == peak_tokens_per_s(dev, 128)
    assert by[("baseline", "async")]["peak_output_tok_s"] == 128 * 50  # 20 ms: 50 steps a second


def test_the_full_run_infers_the_pr_host_from_the_baselines_published_peak(tmp_path):
    from findings_results import record
    from test_serve_host import _cal, _census

    from labkit.facts import PR40143
    from labkit.gpu.device_model import full_batch_device_ns
    from labkit.serve.bench_serve_sim import predict
    from labkit.step_model import peak_tokens_per_s
    from labkit.vllm.serving import WORKLOADS, prompt_layout

    cpu = {"slug": "cpu-x", "device": "cpu"}
    census = _census()  # at 128 x 32: the baseline 8,000 tensor reads and 1.8e6 loop units, pr40143 1.8e6 loop units
    record(tmp_path, "vllm_step", census["rows"], machine=cpu, source="measured-cpu", params=census["params"])
    # what neither side hides, async: the median over points with a forward, 0.2 ms (the forward-0 point left out)
    record(tmp_path, "vllm_overlap", [
        {"regime": "async", "forward_ms": 0.0, "non_overlap_ms": 5.0},
        {"regime": "async", "forward_ms": 10.0, "non_overlap_ms": 0.1},
        {"regime": "async", "forward_ms": 20.0, "non_overlap_ms": 0.2},
        {"regime": "async", "forward_ms": 40.0, "non_overlap_ms": 0.3}], machine=cpu, source="measured-cpu")
    record(tmp_path, "calibration", _cal(900.0, 4.0), machine={"slug": "h200", "device": "cuda"}, source="measured-gpu")
    res = predict(gpus=("h200",), root=tmp_path, census_machine="cpu-x")
    assert res.name == "pr_table" and res.params["fitted"] == {} and list(res.params["inferred"]) == ["read_ns"]
    # the baseline's published peak: a host-bound step of 128 / 6,158 s; async, its host side is that less 0.2 ms;
    # the loop part priced at the H200 node's 4 ns, the rest over 8,000 reads
    step = 128 / PR40143.before.peak_output_tok_s * 1e9
    read = (step - 0.2e6 - 1.8e6 * 4.0) / 8000
    assert res.params["inferred"]["read_ns"]["value"] == pytest.approx(read)
    assert res.params["units"]["read_ns"] == pytest.approx(read) and res.params["units"]["loop_ns"] == 4.0
    # after the fix, 7.2 ms of host beside the H200's device step: device-bound, the peak the device's + 0.2 ms
    dev = full_batch_device_ns("h200", 128, prompt_layout(WORKLOADS["full"])[0])
    by = {(r["arm"], r["metric"]): r for r in res.rows}
    assert by[("pr40143", "peak_output_tok_s")]["predicted"] == peak_tokens_per_s(dev + 0.2e6, 128)
    assert by[("baseline", "peak_output_tok_s")]["inferred"] and not by[("pr40143", "peak_output_tok_s")]["inferred"]
    # the whole-run figures and their gains: published, not predicted
    for key in [(a, m) for a in ("baseline", "pr40143") for m in ("output_tok_s", "mean_tpot_ms", "mean_ttft_s",
                                                                   "duration_s")] + [
            ("pr40143/baseline", "gain_output_tok_s"), ("pr40143/baseline", "gain_mean_tpot_ms")]:
        assert by[key]["predicted"] is None and by[key]["error"] is None and by[key]["published"] is not None
    assert by[("pr40143/baseline", "gain_peak_output_tok_s")]["predicted"] == pytest.approx(
        by[("pr40143", "peak_output_tok_s")]["predicted"] / by[("baseline", "peak_output_tok_s")]["predicted"])


def test_a_missing_input_is_named(tmp_path, capsys):
    import os

    env = dict(os.environ)
    try:
        os.environ["LABKIT_RESULTS"] = str(tmp_path)
        assert main(["bench", "serve-sim", "--no-save"]) == 2
    finally:
        os.environ.clear()
        os.environ.update(env)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "serve-sim needs vllm_step of cpu-epyc-2c" in err[0]
