"""``--size`` on the bench verbs without a test file of their own: quick runs are filed as ``<name>_quick``."""

from __future__ import annotations

import json

from labkit.cli import main as cli_main
from labkit.results import load_results


def test_trace_bench_quick_is_filed_as_quick_with_its_command(results_store, repo_root, tmp_path, capsys):
    base = repo_root / "tests" / "data" / "hta-triton-example-a100.pt.trace.json.gz"
    out = tmp_path / "tb.json"
    argv = ["bench", "trace", "--size-mb", "0.2", "--no-hta", "--base", str(base), "--json", str(out)]
    assert cli_main(argv) == 0
    (res,) = load_results()
    assert (res.name, res.size, res.params["size"]) == ("trace_bench_quick", "quick", "quick")
    assert res.params["size_mb"] == [0.2]
    assert res.command == "labkit " + " ".join(argv)
    # the same file decoded bare, and analyzed at --jobs 1 and 2 and twice at once, each with its ratio to the bare decode
    tools = ["bare-decode", "labkit", "labkit-jobs2", "labkit-two-at-once"]
    assert [r["variant"] for r in res.rows] == tools
    assert res.params["tools"] == tools and res.params["machine_load"]["cpus"]
    assert all(r["vs_bare_decode"] > 0 and r["cpu_s_per_mb"] > 0 and "others_frac" in r for r in res.rows)
    assert all(r["file_bytes"] >= 0.2e6 and r["source_trace"] == "built" for r in res.rows)
    assert json.loads(out.read_text())["name"] == "trace_bench_quick"
    assert "saved" in capsys.readouterr().out


def test_trace_bench_sizes_pick_the_trace_size(results_store, monkeypatch, capsys):
    from labkit.trace.analysis import bench_trace as bench

    seen = []

    def stop(base, out, size_mb):  # record the size asked for, then stop before any real work
        seen.append(size_mb)
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "build_big_trace", stop)
    assert cli_main(["bench", "trace", "--no-hta"]) == 130
    assert cli_main(["bench", "trace", "--no-hta", "--size", "full"]) == 130
    assert seen == [20.0, 100.0]
    assert bench.TRACE.at("full")["size_mb"] == (100.0, 1000.0)  # full also builds a 1 GB trace
    assert not results_store.exists()


def test_engine_size_full_is_filed_under_the_full_name(results_store, capsys):
    argv = ["bench", "engine", "--size", "full", "--device", "sim", "--model", "tiny", "--num-requests", "4",
            "--steps", "2", "--warmup", "1", "--placeholders", "fast", "--scheduling", "cursor",
            "--prefix-ranges", "none", "--profile", "parametric", "--name", "engine_t"]
    assert cli_main(argv) == 0
    (res,) = load_results()
    assert (res.name, res.size, res.params["size"], res.source) == ("engine_t", "full", "full", "simulated")


def test_ranges_full_and_quick_names(results_store, capsys):
    small = ["--device", "cpu", "--requests", "2", "--images", "1", "--layers", "1", "--repeats", "1",
             "--no-sweep", "--builders", "v033"]
    assert cli_main(["bench", "ranges", "--size", "full", *small]) == 0
    assert cli_main(["bench", "ranges", *small]) == 0
    assert sorted((r.name, r.size) for r in load_results()) == [("ranges_step", "full"), ("ranges_step_quick", "quick")]


def test_mm_and_h2d_default_to_quick(results_store, monkeypatch, capsys):
    from labkit.attn import bench_h2d
    from labkit.mm import bench_mm as mm_bench

    seen = []

    def stop(*args, **kw):
        seen.append(next(a for a in (*args, kw.get("size")) if a in ("quick", "full")))
        raise KeyboardInterrupt

    monkeypatch.setattr(mm_bench, "run_benchmarks", stop)
    monkeypatch.setattr(bench_h2d, "run_benchmarks", stop)
    for argv in (["mm"], ["mm", "--size", "full"], ["h2d", "--device", "cpu"],
                 ["h2d", "--device", "cpu", "--size", "full"]):
        assert cli_main(["bench", *argv]) == 130
    assert seen == ["quick", "full", "quick", "full"]
    assert cli_main(["bench", "mm", "--quick"]) == 2  # one way to say the size
    assert "unrecognized arguments: --quick" in capsys.readouterr().err


def test_attn_bench_fails_on_a_kernel_row_off_the_reference(results_store, monkeypatch, capsys):
    """The GPU check's attention step is a correctness check too: a kernel row beyond its dtype's
    tolerance against the fp32 reference (or NaN, or an error) fails the command; peers never do."""
    from labkit.attn import bench_attn

    def rows(rel):
        return [{"variant": "triton_prefix", "case": "tiny", "dtype": "bfloat16", "max_abs_err": 0.01, "rel_err": rel},
                {"variant": "sdpa_mask", "case": "tiny", "dtype": "bfloat16", "max_abs_err": 9.0, "rel_err": 0.5}]

    for rel, rc in ((2.1e-3, 0), (0.05, 1), (float("nan"), 1)):
        monkeypatch.setattr(bench_attn, "run_bench", lambda *a, rel=rel, **k: (rows(rel), "interpreted"))
        assert cli_main(["bench", "attn", "--device", "cpu", "--no-save"]) == rc, rel
    assert "FAILED: triton_prefix on tiny: relative error 0.05" in capsys.readouterr().out
    assert bench_attn.kernel_row_ok({"dtype": "float32", "max_abs_err": 1e-6, "rel_err": 1e-6})
    assert not bench_attn.kernel_row_ok({"dtype": "float32", "max_abs_err": 1e-6, "rel_err": 1e-6, "error": "x"})


def test_attn_bench_on_a_cpu_switches_to_the_interpreter_itself(tmp_path):
    """Started without TRITON_INTERPRET (as a user runs it; the suite sets it for itself), the
    command still runs the kernel under the interpreter and checks it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["LABKIT_RESULTS"] = str(tmp_path)
    run = subprocess.run([sys.executable, "-m", "labkit", "bench", "attn", "--device", "cpu", "--no-save"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    kernel = next(line for line in run.stdout.splitlines() if line.startswith("tiny") and "triton_prefix" in line)
    assert "ERROR" not in kernel and "FAILED" not in run.stdout
