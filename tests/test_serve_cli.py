"""``labkit bench serve-sim``: its few options, its refusals (one line on stderr, exit 2, before any
work) and its peaks, worked by hand from the device model and a hand-made chain."""

from __future__ import annotations

import argparse
import importlib.util

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


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_one_line_and_exit_2(capsys):
    assert main(["bench", "serve-sim", "--num-prompts", "4", "--no-save"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vLLM is not installed" in err[0]


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
