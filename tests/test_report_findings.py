"""The findings: each method's figure is what its result file says (hand-made files, figures worked by
hand in ``tests/findings_results.py``), a missing file drops its row, and the README's block is what
``python -m labkit.report.findings --readme`` makes from the committed results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from findings_results import CPU_A, write_five, write_serve_sim
from labkit.errors import UsageError
from labkit.mm.overlap import PR40143
from labkit.report.findings import BEGIN, END, findings_markdown, lab_findings, replace_block, rewrite_readme

REPO = Path(__file__).resolve().parents[1]
FIVE = ["mini_engine_graphs", "h200_eager", "vllm_cpu_ab", "sim_gpu_vllm_host", "bubble_model"]


@pytest.fixture()
def store(tmp_path):
    write_five(tmp_path / "results")
    return tmp_path / "results"


def _by_key(root):
    return {f.key: f for f in lab_findings(root)}


def test_each_figure_is_what_its_file_says(store):
    got = _by_key(store)
    assert list(got) == FIVE
    graphs = got["mini_engine_graphs"]
    assert graphs.value == pytest.approx(1.25) and graphs.figure == "1.25x output tok/s"
    assert (graphs.source, graphs.machine, graphs.result) == ("simulated", "cpu-a", "cpu-a/engine.json")
    assert "8.0 ms" in graphs.detail and "10.0 ms" in graphs.detail  # host step under the device step
    assert graphs.notebook == "02_idle_bubbles"

    eager = got["h200_eager"]
    assert eager.value == pytest.approx(3.0) and eager.figure == "3.00x output tok/s"
    assert (eager.source, eager.machine, eager.device) == ("measured-gpu", "gpu-a", "Test GPU")
    assert eager.result == "gpu-a/engine_quick.json" and "80%" in eager.detail and "40%" in eager.detail

    ab = got["vllm_cpu_ab"]
    assert ab.value == pytest.approx(2.0) and ab.figure == "2.00x TPOT"
    assert "42.0 -> 21.0 ms" in ab.detail and "1.50x" in ab.detail and "0.32.0" in ab.method
    assert (ab.source, ab.machine, ab.device) == ("measured-cpu", "cpu-a", "Test CPU A, 2 cores")
    assert ab.published_value == pytest.approx(33.81 / 24.58)

    host = got["sim_gpu_vllm_host"]
    assert host.value == pytest.approx(1.1) and host.figure == "1.10x output tok/s"  # the forward off the host
    assert "1.60x" in host.detail  # the steps as measured, beside it
    assert (host.machine, host.result) == ("cpu-b", "cpu-b/engine_vllm_host_off_host.json")
    assert host.device == "simulated H200 profile; host Test CPU B, 4 cores"

    bubble = got["bubble_model"]
    assert bubble.value == pytest.approx(0.25) and bubble.figure == "25% of the TPOT drop"
    assert "2.00 of 8.00 ms" in bubble.detail and bubble.notebook == "01_placeholder_scheduler"

    for f in got.values():
        if f.key != "bubble_model":  # the bubble model sets a fraction beside the published drop
            assert f.published_value in (pytest.approx(3146.8 / 2478.5), pytest.approx(33.81 / 24.58))
        assert f.leaves_out and f.labkit_commit == "0123456789ab"


@pytest.mark.parametrize("missing, key", [
    ("cpu-a/mm_overlap.json", "bubble_model"), ("cpu-a/vllm_ab.json", "vllm_cpu_ab"),
    ("gpu-a/engine_quick.json", "h200_eager"),
])
def test_a_missing_file_drops_its_row(store, missing, key):
    (store / missing).unlink()
    keys = list(_by_key(store))
    assert key not in keys and keys == [k for k in FIVE if k != key]


def test_without_either_host_file_the_simulated_host_row_goes_and_without_off_host_the_measured_stands(store):
    (store / "cpu-b/engine_vllm_host_off_host.json").unlink()
    host = _by_key(store)["sim_gpu_vllm_host"]
    assert host.value == pytest.approx(1.6) and host.result == "cpu-b/engine_vllm_host.json"
    (store / "cpu-b/engine_vllm_host.json").unlink()
    assert "sim_gpu_vllm_host" not in _by_key(store)


def test_a_gpu_run_under_graphs_is_preferred_to_the_simulated_one(store):
    from findings_results import GPU_A, engine_row, record

    record(store, "engine", [engine_row("tensor", "full", 800.0), engine_row("list", "full", 1200.0)],
           machine=GPU_A, source="measured-gpu")  # full size: replaces the quick run on that machine
    got = _by_key(store)
    assert got["mini_engine_graphs"].value == pytest.approx(1.5)
    assert got["mini_engine_graphs"].source == "measured-gpu"
    assert "h200_eager" not in got  # that run has no eager rows


def test_rows_without_the_needed_rows_give_no_answer(tmp_path):
    from findings_results import record

    record(tmp_path, "vllm_ab", [{"variant": "merged", "mean_tpot_us": 1.0}], machine=CPU_A, source="measured-cpu")
    record(tmp_path, "mm_overlap", [{"case": "scale that explains it all", "explained_fraction": 1.0}],
           machine=CPU_A, source="simulated")
    assert lab_findings(tmp_path) == []
    assert lab_findings(tmp_path / "nothing here") == []


def test_the_serve_simulator_row_appears_only_with_its_file(store):
    assert "serve_sim" not in _by_key(store)
    write_serve_sim(store)
    got = _by_key(store)
    assert list(got) == FIVE + ["serve_sim"]
    sim = got["serve_sim"]
    assert sim.value == pytest.approx(1.2) and sim.figure == "1.20x output tok/s"
    assert sim.published_value == pytest.approx(PR40143.throughput_gain)
    assert (sim.source, sim.machine, sim.result) == ("simulated", "cpu-a", "cpu-a/serve_sim.json")
    assert "h200" in sim.device and "1200" in sim.detail
    # the absolute times, predicted against published, in what the method leaves out
    assert "mean TPOT 30 -> 25 ms vs published 27 -> 22.5" in sim.leaves_out


def test_the_serve_simulator_row_reads_the_gpu_the_result_names(store):
    write_serve_sim(store, extra_gpu="h100")
    sim = _by_key(store)["serve_sim"]
    assert sim.value == pytest.approx(1.2) and "h200" in sim.device and "h100" not in sim.detail


def test_the_markdown_block_has_one_row_per_finding_with_its_link(store):
    found = lab_findings(store)
    text = findings_markdown(found)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| Method")]
    assert len(rows) == len(found) == 5
    assert "**1.25x output tok/s**" in rows[0] and "[02](notebooks/02_idle_bubbles.py)" in rows[0]
    for f in found:
        assert (REPO / "notebooks" / f"{f.notebook}.py").is_file()


def test_rewrite_replaces_only_the_block(store, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{BEGIN}\nstale\n{END}\nafter\n", encoding="utf-8")
    assert rewrite_readme(readme, store, check=True) is True
    assert "stale" in readme.read_text()  # --check writes nothing
    assert rewrite_readme(readme, store) is True
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n") and text.endswith(f"{END}\nafter\n") and "stale" not in text
    assert "**3.00x output tok/s**" in text
    assert rewrite_readme(readme, store) is False  # up to date now
    with pytest.raises(UsageError):
        replace_block("no markers here", "x")
    with pytest.raises(UsageError):
        replace_block(f"{END}\n{BEGIN}", "x")


def test_the_command_on_bad_input_says_one_line_and_exits_2(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no block\n", encoding="utf-8")
    for args in (["--readme", str(readme)], ["--readme", str(tmp_path / "missing.md")], ["--check"]):
        proc = subprocess.run([sys.executable, "-m", "labkit.report.findings", *args], capture_output=True,
                              text=True, timeout=120, cwd=REPO)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert readme.read_text() == "no block\n"


def test_the_committed_readme_block_is_what_the_command_makes_from_the_committed_results():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
    expected = findings_markdown(lab_findings(REPO / "data" / "results"))
    assert block == expected, "README.md's findings are stale: run python -m labkit.report.findings --readme README.md"
    assert len(lab_findings(REPO / "data" / "results")) >= 5
