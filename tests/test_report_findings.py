"""The answer and its evidence: each figure is what its result file says (hand-made files, figures
worked by hand in ``tests/findings_results.py``), a missing file says so in its row instead of
dropping it, and README's block is what ``labkit results --readme`` makes from the committed results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from findings_results import write_results
from labkit.errors import UsageError
from labkit.report.findings import BEGIN, END, findings_markdown, lab_findings, replace_block, rewrite_readme

REPO = Path(__file__).resolve().parents[1]
KEYS = ["unit_cost", "engine_saving", "server_ab", "peaks", "whole_run"]


@pytest.fixture()
def store(tmp_path):
    write_results(tmp_path / "results")
    return tmp_path / "results"


def _by_key(found):
    return {e["key"]: e for e in found["evidence"]}


def test_each_evidence_figure_is_what_its_file_says(store):
    found = lab_findings(store)
    got = _by_key(found)
    assert list(got) == KEYS
    assert got["unit_cost"]["figure"] == "1.2 us against 8 ns (150x)"
    assert got["engine_saving"]["figure"].startswith("8.00 ms a step (17.00 -> 9.00 ms")
    assert got["server_ab"]["figure"].startswith("mean TPOT 42.0 -> 21.0 ms (2.00x)")
    assert "64x64" in got["server_ab"]["what"] and "merged" in got["server_ab"]["what"]
    # the published peak is the H200's: the H100's figure is its own cap, with no error against it
    assert got["peaks"]["figure"] == "H200 9,600 (+6%); an H100 device-bound at 6,400"
    assert "device-bound on the H200" in got["peaks"]["what"] and "baseline host-bound" in got["peaks"]["what"]
    # the whole run: not predicted; the workload whose finishes moved between arms (the one-arm run left out)
    assert got["whole_run"]["figure"] == ("16 x 32 x 1024x1536, 64 out: requests finished 0.5 s apart in one arm, "
                                          "6.0 s in the other")
    assert got["whole_run"]["published"] == "1.27x output tok/s" and got["whole_run"]["result"] == (
        "cpu-a/vllm_serve_timeline.json")
    assert (got["peaks"]["source"], got["peaks"]["machine"], got["peaks"]["result"]) == (
        "simulated", "cpu-a", "cpu-a/pr_table.json")


def test_the_answer_reads_the_same_results(store):
    text = lab_findings(store)["answer"]
    assert "8.0 ms" in text and "17.0 -> 9.0 ms" in text  # the census's saving
    assert "13.5 ms on an H200" in text and "9,600 tok/s against the published 9,088 (+5.6%)" in text
    assert "an H100's 20.0 ms step caps it at 6,400" in text
    assert "2.00 us (the lab measures cpu-a 1.00-4.00 us)" in text
    assert text.startswith("Predicted on an H200: a peak ratio of 1.53x against the published 1.48x. The whole-run "
                           "gain (published 1.27x output tok/s, 1.38x mean TPOT) is not predicted")
    assert ("one workload's requests (16 x 32 x 1024x1536, 64 out) finished 0.5 s apart in one arm and 6.0 s in the "
            "other, where the PR's average request finished 4.8 s before its last") in text


@pytest.mark.parametrize("gone, key", [("calibration", "unit_cost"), ("vllm_step", "engine_saving"),
                                       ("vllm_ab", "server_ab"), ("pr_table", "peaks"),
                                       ("vllm_serve_timeline", "whole_run")])
def test_a_missing_result_says_so_in_its_row(tmp_path, gone, key):
    write_results(tmp_path, without=(gone,))
    found = lab_findings(tmp_path)
    row = _by_key(found)[key]
    assert row["missing"] and row["figure"].startswith("not recorded: ") and len(found["evidence"]) == 5
    if gone in ("vllm_step", "pr_table"):
        assert found["answer"] is None and found["why_no_answer"]


def test_the_markdown_block_opens_with_the_answer_and_has_five_rows(store):
    text = findings_markdown(lab_findings(store))
    assert text.startswith("**Why did #40143 gain 1.27x?** Predicted on an H200: a peak ratio of 1.53x")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| Evidence")]
    assert len(rows) == 5 and "[08](notebooks/08_inside_vllm.py)" in rows[-1]
    for e in lab_findings(store)["evidence"]:
        assert (REPO / "notebooks" / f"{e['notebook']}.py").is_file()


def test_rewrite_replaces_only_the_block(store, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{BEGIN}\nstale\n{END}\nafter\n", encoding="utf-8")
    assert rewrite_readme(readme, store, check=True) is True
    assert "stale" in readme.read_text()  # --check writes nothing
    assert rewrite_readme(readme, store) is True
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n") and text.endswith(f"{END}\nafter\n") and "stale" not in text
    assert rewrite_readme(readme, store) is False  # up to date now
    with pytest.raises(UsageError):
        replace_block("no markers here", "x")
    with pytest.raises(UsageError):
        replace_block(f"{END}\n{BEGIN}", "x")


def test_the_command_on_bad_input_says_one_line_and_exits_2(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no block\n", encoding="utf-8")
    for args in (["--readme", str(readme)], ["--readme", str(tmp_path / "missing.md")], ["--check"]):
        proc = subprocess.run([sys.executable, "-m", "labkit", "results", *args], capture_output=True,
                              text=True, timeout=120, cwd=REPO)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert readme.read_text() == "no block\n"


def test_the_committed_readme_block_is_what_the_command_makes_from_the_committed_results():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
    found = lab_findings(REPO / "data" / "results")
    assert block == findings_markdown(found), "README.md's findings are stale: run labkit results --readme README.md"
    assert found["answer"] and not any(e["missing"] for e in found["evidence"])
