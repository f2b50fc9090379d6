"""The simulated GPU fed with real vLLM's host (``labkit bench engine --host-from``), on fixed host tables.

A uniform test profile gives the tiny model a 1 ms device step; the host tables below are made up
(never a recording) so every expected step time is worked out by hand: under full CUDA graphs
with async scheduling a step takes max(device, engine-core host) plus the small runtime costs of
the profile, with sync scheduling their sum (the sampler's host side hides under the device step
there too), and a frontend slower than both sets the pace. The profile's runtime costs (launches,
the pinned input copy, the event) add some tens of microseconds a step: ``RUNTIME``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labkit.engine.hostfrom import (HOST_PHASES, VARIANT_ENGINE, host_table_from_rows, load_host_table, ratio_rows,
                                    run_host_from, solve_published)
from labkit.engine.model import LAYER_OPS
from labkit.engine.device.profiles import CopyCost, DeviceProfile, OpCost
from labkit.errors import UsageError
from labkit.mm.overlap import PublishedResult

MS = 1e6
RUNTIME = 0.06  # ms: the profile's launch, copy and event costs per step, at most


def _profile(step_device_ns=1e6):
    n_ops = 2 * len(LAYER_OPS) + 4  # the tiny model's ops per step
    return DeviceProfile(name="test-uniform", origin="test", parametric=True, ops={},
                         default_op=OpCost(step_device_ns / n_ops), launch_overhead_ns=5_000, sync_overhead_ns=500,
                         event_overhead_ns=500, h2d_pageable=CopyCost(4000, 8.0), h2d_pinned=CopyCost(2000, 25.0),
                         d2h_pinned=CopyCost(2000, 25.0))


def _rows(phases_us: dict[str, dict[str, float]], requests=8, images=4):
    return [{"variant": v, "num_requests": requests, "images": images, "phase": p, "median_us": us}
            for v, ph in phases_us.items() for p, us in ph.items()]


#: engine core: baseline 3.0 ms (schedule 2.4), merged 0.6 ms; frontend 0.1 ms; encoder 0.02 ms
TABLE = {"baseline": {"step": 9000.0, "other": 100.0, "schedule": 2400.0, "prepare_inputs": 300.0, "encoder": 20.0,
                      "sample": 100.0, "update_from_output": 80.0, "process_outputs": 100.0},
         "merged": {"step": 6500.0, "other": 100.0, "schedule": 0.0, "prepare_inputs": 300.0, "encoder": 20.0,
                    "sample": 100.0, "update_from_output": 80.0, "process_outputs": 100.0}}


def _run(table, **kw):
    kw.setdefault("cudagraph", ("full",))
    return {(r["vllm_variant"], r["async_scheduling"]): r
            for r in run_host_from(table, profile=_profile(), model="tiny", workload="pr40143", steps=6, warmup=2, **kw)}


def test_table_from_rows_scales_and_folds_the_encoder():
    t = host_table_from_rows(_rows(TABLE), requests=8, images=4, cpu_speed=0.5)
    assert t.phases_ns["baseline"]["schedule"] == pytest.approx(2400e3 * 0.5)
    assert t.phases_ns["baseline"]["other"] == pytest.approx((100 + 20) * 1e3 * 0.5)
    assert t.core_ns("baseline") == pytest.approx((120 + 2400 + 300 + 100 + 80) * 1e3 * 0.5)
    assert t.frontend_ns("merged") == pytest.approx(100e3 * 0.5)
    with pytest.raises(UsageError, match="no 128 x 32 point"):
        host_table_from_rows(_rows(TABLE), requests=128, images=32)
    with pytest.raises(UsageError, match="lacks"):
        host_table_from_rows(_rows({"merged": {"schedule": 1.0}}), requests=8, images=4)
    with pytest.raises(UsageError, match="cpu-speed"):
        host_table_from_rows(_rows(TABLE), requests=8, images=4, cpu_speed=0)


def test_off_host_rows_make_their_own_table_and_never_mix_with_the_measured_ones():
    off = {v: {p: us / 2 for p, us in ph.items()} for v, ph in TABLE.items()}
    rows = _rows(TABLE) + [dict(r, phase="off_host:" + r["phase"]) for r in _rows(off)]
    cpu = host_table_from_rows(rows, requests=8, images=4)
    gpu_like = host_table_from_rows(rows, requests=8, images=4, forward="off-host")
    assert cpu.forward == "cpu" and gpu_like.forward == "off-host"
    assert cpu.phases_ns["baseline"]["schedule"] == pytest.approx(2400e3)
    assert gpu_like.phases_ns["baseline"]["schedule"] == pytest.approx(1200e3)
    assert gpu_like.phases_ns["merged"]["other"] == pytest.approx(60e3)  # (100 + 20) / 2, the encoder folded in
    assert gpu_like.census_step_ns["baseline"] == pytest.approx(4500e3)
    with pytest.raises(UsageError, match="no steps with the forward off the host"):
        host_table_from_rows(_rows(TABLE), requests=8, images=4, forward="off-host")
    with pytest.raises(UsageError, match="--host-forward must be one of"):
        host_table_from_rows(rows, requests=8, images=4, forward="gpu")


def test_full_graphs_async_step_is_the_longer_of_host_and_device():
    rows = _run(host_table_from_rows(_rows(TABLE), requests=8, images=4))
    base, merged = rows[("baseline", True)], rows[("merged", True)]
    # baseline: the engine core's 3.0 ms exceed the 1 ms device step: host-bound, the device idles ~2/3
    assert base["tpot_mean_ms"] == pytest.approx(3.0, abs=RUNTIME)
    assert base["device_idle_frac"] == pytest.approx(1 - 1.0 / 3.0, abs=0.03)
    # merged: 0.6 ms of host hide behind the 1 ms device step
    assert merged["tpot_mean_ms"] == pytest.approx(1.0, abs=RUNTIME)
    assert merged["device_idle_frac"] == pytest.approx(0.0, abs=0.03)
    assert base["tpot_mean_ms"] > merged["tpot_mean_ms"]  # tensor/loop above list under full graphs
    assert (base["placeholder"], base["scheduling"]) == VARIANT_ENGINE["baseline"]
    assert base["cpu_speed_factor"] == 1.0 and base["cudagraph_run"] == "full"


def test_sync_scheduling_adds_host_and_device():
    rows = _run(host_table_from_rows(_rows(TABLE), requests=8, images=4), async_modes=(False,))
    # before the device: other 0.12 (with the encoder's 0.02) + schedule + prepare 0.3; then the
    # device's 1 ms (the sampler's 0.1 ms of host under it); then update_from_output 0.08
    assert rows[("baseline", False)]["tpot_mean_ms"] == pytest.approx(0.12 + 2.4 + 0.3 + 1.0 + 0.08, abs=RUNTIME)
    assert rows[("merged", False)]["tpot_mean_ms"] == pytest.approx(0.12 + 0.3 + 1.0 + 0.08, abs=RUNTIME)


def test_a_host_twice_as_fast_halves_a_host_bound_step():
    rows = _run(host_table_from_rows(_rows(TABLE), requests=8, images=4, cpu_speed=0.5))
    assert rows[("baseline", True)]["tpot_mean_ms"] == pytest.approx(1.5, abs=RUNTIME)
    assert rows[("merged", True)]["tpot_mean_ms"] == pytest.approx(1.0, abs=RUNTIME)  # still device-bound


def test_a_slow_frontend_sets_the_pace_in_its_own_process():
    slow = {v: dict(p, process_outputs=2000.0) for v, p in TABLE.items()}
    rows = _run(host_table_from_rows(_rows(slow), requests=8, images=4))
    assert rows[("merged", True)]["tpot_mean_ms"] == pytest.approx(2.0, abs=RUNTIME)  # frontend 2 ms > core, device
    assert rows[("baseline", True)]["tpot_mean_ms"] == pytest.approx(3.0, abs=RUNTIME)  # the core still longer


def test_ratio_rows_beside_the_published_ones():
    rows = list(_run(host_table_from_rows(_rows(TABLE), requests=8, images=4), async_modes=(True, False)).values())
    pub = PublishedResult("test", 8, 4.0, 2.0, 100.0, 200.0, 1.0, 1.0)
    ratios = ratio_rows(rows, pub, after=("merged",))
    by = {r["async_scheduling"]: r for r in ratios}
    assert by[True]["tok_s_ratio"] == pytest.approx(3.0, rel=0.05)
    assert by[False]["tok_s_ratio"] == pytest.approx(3.9 / 1.5, rel=0.05)
    assert by[True]["published_tok_s_ratio"] == 2.0 and by[True]["published_tpot_before_ms"] == 4.0


def test_solve_published_worked_by_hand():
    t = host_table_from_rows(_rows(TABLE), requests=8, images=4)
    # engine core 3.0 ms before, 0.6 ms after; frontend 0.1 ms; published TPOT 6.0 -> 2.5 ms
    pub = PublishedResult("test", 8, 6.0, 2.5, 100.0, 240.0, 1.0, 1.0)
    solved = {q["scheduling"]: q for q in solve_published(t, pub, after="merged")}
    a = solved["async"]  # before host-bound: s = 6.0 / 3.0 = 2; after: 2 x 0.6 = 1.2 <= 2.5: D = 2.5
    assert a["solved"] and a["cpu_speed_factor"] == pytest.approx(2.0) and a["device_step_ms"] == pytest.approx(2.5)
    s = solved["sync"]  # s = (6.0 - 2.5) / (3.0 - 0.6) = 1.4583; D = 2.5 - 1.4583 x 0.6 = 1.625
    assert s["cpu_speed_factor"] == pytest.approx(3.5 / 2.4) and s["device_step_ms"] == pytest.approx(2.5 - 0.6 * 3.5 / 2.4)
    # a published result both sides host-bound: async has no device step to solve for
    tight = PublishedResult("tight", 8, 6.0, 1.0, 100.0, 600.0, 1.0, 1.0)
    a2 = {q["scheduling"]: q for q in solve_published(t, tight, after="merged")}
    assert not a2["async"]["solved"] and a2["async"]["device_step_ms"] is None
    assert not a2["sync"]["solved"]  # D = 1.0 - (5 / 2.4) x 0.6 < 0


def _write_result(path, rows, name="vllm_step"):
    path.write_text(json.dumps({"name": name, "source": "measured-cpu", "size": "full", "rows": rows,
                                "machine": {"slug": "test"}}), encoding="utf-8")
    return path


def test_load_host_table_reads_a_result_file(tmp_path):
    t = load_host_table(_write_result(tmp_path / "vllm_step.json", _rows(TABLE)), requests=8, images=4)
    assert set(t.phases_ns) == {"baseline", "merged"} and t.origin.startswith("test/vllm_step.json")
    assert set(t.phases_ns["merged"]) == set(HOST_PHASES)
    with pytest.raises(UsageError, match="not a vllm_step result"):
        load_host_table(_write_result(tmp_path / "other.json", [], name="engine"))


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "labkit", "bench", "engine", *args], capture_output=True, text=True,
                          timeout=600)


def test_cli_prints_every_row_with_its_cpu_factor_and_the_prs_ratio(tmp_path):
    path = _write_result(tmp_path / "vllm_step.json", _rows(TABLE, requests=128, images=32))
    p = _bench("--device", "sim", "--host-from", str(path), "--cpu-speed", "0.8", "--cudagraph", "full",
               "--steps", "3", "--warmup", "1", "--no-save")
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith(("baseline ", "merged "))]
    assert len(rows) == 4 and all(" 0.80 " in line for line in rows)  # 2 variants x async/sync, factor on each
    assert "PR x1.27" in p.stdout and "33.81 -> 24.58" in p.stdout
    assert "what reproduces the PR's TPOTs" in p.stdout


def test_cli_host_forward_off_host_names_its_result_and_says_so(tmp_path):
    rows = _rows(TABLE, requests=128, images=32)
    path = _write_result(tmp_path / "vllm_step.json", rows + [dict(r, phase="off_host:" + r["phase"]) for r in rows])
    p = _bench("--device", "sim", "--host-from", str(path), "--host-forward", "off-host", "--cudagraph", "full",
               "--steps", "3", "--warmup", "1", "--no-save", "--json", str(tmp_path / "out.json"))
    assert p.returncode == 0, p.stderr
    assert "forward off the host" in p.stdout.splitlines()[0]
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["name"] == "engine_vllm_host_off_host_quick" and doc["params"]["host_forward"] == "off-host"
    bare = _write_result(tmp_path / "old.json", rows)
    p = _bench("--device", "sim", "--host-from", str(bare), "--host-forward", "off-host", "--no-save")
    assert p.returncode == 2 and "no steps with the forward off the host" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("args, words", [
    (["--host-from", "nope.json"], "cannot read nope.json"),
    (["--cpu-speed", "0.5"], "apply with --host-from only"),
    (["--host-forward", "off-host"], "apply with --host-from only"),
    (["--host-from", "x.json", "--device", "cpu"], "simulated device only"),
    (["--host-from", "x.json", "--host-point", "big"], "--host-point must look like"),
])
def test_cli_bad_input(args, words, tmp_path):
    p = _bench(*args)
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr
