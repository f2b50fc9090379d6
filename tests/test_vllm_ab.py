"""labkit.vllm_ab without vLLM: variants, the pre-PR code it patches in, ingestion, the A/B script.

The patches themselves are checked against a real vLLM in tests/vllm_conformance/.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from labkit import vllm_ab, vllm_ab_results
from labkit.attn.prefix_ranges import build_prefix_range_tensor
from labkit.errors import UsageError
from labkit.results import load_result

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "vllm_ab.sh"


def test_importing_does_not_import_vllm():
    code = "import sys, labkit.vllm_ab; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_variants_cover_both_prs_both_ways():
    combos = {(v.placeholder, v.prefix_range) for v in vllm_ab.VARIANTS.values()}
    assert combos == {("tensor", "per-layer"), ("list", "per-layer"), ("tensor", "per-step"), ("list", "per-step")}
    assert vllm_ab.get_variant("baseline").placeholder == "tensor"
    assert vllm_ab.get_variant("merged").prefix_range == "per-step"
    with pytest.raises(UsageError, match="unknown vLLM A/B variant 'nope'"):
        vllm_ab.get_variant("nope")


def test_plugin_is_a_no_op_without_the_variable(monkeypatch):
    monkeypatch.delenv(vllm_ab.ENV_VAR, raising=False)
    vllm_ab.load_plugin()  # must not import vLLM (not installed here)
    assert vllm_ab.applied_variant() is None


class _Old:
    """The attributes the pre-#40143 members read, on a plain object."""

    def __init__(self, length, is_embed=None):
        self.length, self.is_embed = length, is_embed
        self.embeds_cumsum = vllm_ab._tensor_embeds_cumsum(self)

    get_num_embeds = vllm_ab._tensor_get_num_embeds
    get_embeds_indices_in_range = vllm_ab._tensor_get_embeds_indices_in_range


def test_pre_40143_members_follow_table_b3():
    mask = torch.tensor([False, True, False, True, True])
    old = _Old(5, mask)
    assert isinstance(old.embeds_cumsum, torch.Tensor) and old.embeds_cumsum.tolist() == [0, 1, 1, 2, 3]
    assert old.get_num_embeds() == 3 and type(old.get_num_embeds()) is int
    assert old.get_embeds_indices_in_range(3, 5) == (1, 3)  # the docstring example
    assert old.get_embeds_indices_in_range(0, 2) == (0, 1)
    assert old.get_embeds_indices_in_range(0, 0) == (0, 3)  # end_idx == 0 wraps to the total
    with pytest.raises(IndexError):
        old.get_embeds_indices_in_range(0, 6)
    assert _Old(5).get_num_embeds() == 5 and _Old(5).get_embeds_indices_in_range(2, 4) == (2, 4)
    assert _Old(4, torch.zeros(4, dtype=torch.bool)).get_num_embeds() == 0
    with pytest.raises(IndexError):
        _Old(0, torch.zeros(0, dtype=torch.bool)).get_num_embeds()


def test_per_layer_prefix_range_tensor_hand_worked():
    ranges = {0: [(5, 9), (20, 30)], 2: [(1, 1)]}  # row 1 missing, row 3 padding
    got = vllm_ab.per_layer_prefix_range_tensor(ranges, 4, "cpu")
    expected = torch.tensor(
        [[[5, 9], [20, 30]], [[0, 0], [0, 0]], [[1, 1], [0, 0]], [[0, 0], [0, 0]]], dtype=torch.int32
    )
    assert got.dtype == torch.int32 and torch.equal(got, expected)
    assert torch.equal(got, build_prefix_range_tensor(ranges, 4, "cpu"))
    assert vllm_ab.per_layer_prefix_range_tensor(None, 4, "cpu") is None
    assert vllm_ab.per_layer_prefix_range_tensor({0: [], 1: [(0, 0)]}, 3, "cpu") is None


def test_bench_row_reads_documented_keys():
    bench = json.loads((DATA / "vllm_bench_baseline.json").read_text())
    row = vllm_ab_results.bench_row(bench, variant="baseline", images=32)
    assert row["variant"] == "baseline" and row["placeholder"] == "tensor" and row["prefix_range"] == "per-layer"
    assert row["model"] == "google/gemma-4-E4B-it" and row["num_prompts"] == 128 and row["images_per_request"] == 32
    assert row["output_throughput_tok_s"] == 2478.5
    assert row["duration_s"] == 413.16
    assert row["mean_tpot_us"] == pytest.approx(33810.0)
    assert row["p99_itl_us"] == pytest.approx(61000.0)
    assert "ttfts" not in row and "itls" not in row  # per-request lists are dropped
    with pytest.raises(UsageError, match="missing key"):
        vllm_ab_results.bench_row({"duration": 1.0}, variant="baseline")
    with pytest.raises(UsageError, match="not a number"):
        vllm_ab_results.bench_row({**bench, "output_throughput": "fast"}, variant="baseline")


def test_ingest_files_rows_and_ratios(tmp_path):
    results, traces = tmp_path / "results", tmp_path / "traces"
    tdir = tmp_path / "prof"
    tdir.mkdir()
    (tdir / "rank0.123.pt.trace.json.gz").write_bytes(b"\x1f\x8b")  # only copied, never parsed
    (tdir / "profiler_out_0.txt").write_text("table")
    kw = dict(images=32, gpu_name="NVIDIA H200", results_root=results, traces_root=traces)
    path = vllm_ab_results.ingest(DATA / "vllm_bench_baseline.json", variant="baseline", trace_dir=tdir, **kw)
    assert path == results / "h200" / "vllm_ab.json"
    vllm_ab_results.ingest(DATA / "vllm_bench_merged.json", variant="merged", **kw)
    vllm_ab_results.ingest(DATA / "vllm_bench_merged.json", variant="merged", **kw)  # replaces, not appends
    res = load_result("vllm_ab", machine="h200", root=results)
    assert res.source == "measured-gpu" and res.machine["gpu_name"] == "NVIDIA H200"
    assert [r["variant"] for r in res.rows] == ["baseline", "merged"]
    assert res.rows[0]["trace_files"] == [str(traces / "h200" / "vllm_ab" / "baseline" / "rank0.123.pt.trace.json.gz")]
    assert (traces / "h200" / "vllm_ab" / "baseline" / "rank0.123.pt.trace.json.gz").is_file()
    table = vllm_ab_results.ab_table(res.rows).set_index("variant")
    assert table.loc["merged", "output_throughput_ratio"] == pytest.approx(3146.8 / 2478.5)
    assert table.loc["merged", "mean_tpot_ratio"] == pytest.approx(24.58 / 33.81)
    assert table.loc["baseline", "output_throughput_ratio"] == pytest.approx(1.0)


def test_ingest_refuses_cpu_machines_and_bad_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_DEVICE", "cpu")
    from labkit.device import describe_machine

    describe_machine.cache_clear()
    try:
        with pytest.raises(UsageError, match="no GPU here"):
            vllm_ab_results.ingest(DATA / "vllm_bench_merged.json", variant="merged", results_root=tmp_path)
    finally:
        describe_machine.cache_clear()
    with pytest.raises(UsageError, match="not found"):
        vllm_ab_results.ingest(tmp_path / "nope.json", variant="merged", gpu_name="NVIDIA H200", results_root=tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="cannot read"):
        vllm_ab_results.ingest(bad, variant="merged", gpu_name="NVIDIA H200", results_root=tmp_path)
    with pytest.raises(UsageError, match="no \\*.pt.trace"):
        vllm_ab_results.ingest(DATA / "vllm_bench_merged.json", variant="merged", gpu_name="NVIDIA H200",
                       results_root=tmp_path, trace_dir=tmp_path)
    assert not list(tmp_path.rglob("vllm_ab.json"))  # nothing half-written


def test_cli_ingest_and_errors(tmp_path, capsys):
    rc = vllm_ab.main(["ingest", "--variant", "merged", "--bench-json", str(DATA / "vllm_bench_merged.json"),
                       "--images", "32", "--gpu-name", "NVIDIA H200", "--results-root", str(tmp_path),
                       "--json", str(tmp_path / "row.json")])
    assert rc == 0
    assert "3146.8 tok/s" in capsys.readouterr().out
    assert json.loads((tmp_path / "row.json").read_text())["mean_tpot_us"] == pytest.approx(24580.0)
    rc = vllm_ab.main(["ingest", "--variant", "fastest", "--bench-json", str(DATA / "vllm_bench_merged.json"),
                       "--gpu-name", "NVIDIA H200", "--results-root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "unknown vLLM A/B variant" in err
    assert vllm_ab.main(["variants"]) == 0
    assert "baseline" in capsys.readouterr().out
    assert vllm_ab.main(["bogus"]) == 2


def _script(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO, timeout=60)


def test_ab_script_dry_run_prints_the_pr_benchmark_commands(tmp_path):
    out = _script("--dry-run", "--variants", "baseline,merged", "--profile", "--out", str(tmp_path / "runs"),
                  "--python", "python3", "--", "--max-model-len", "16384")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    serves = [line for line in lines if " serve " in line and " bench serve " not in line]
    benches = [line for line in lines if " bench serve " in line]
    ingests = [line for line in lines if "labkit.vllm_ab ingest" in line]
    assert len(serves) == len(benches) == len(ingests) == 2
    assert serves[0].startswith("+ LABKIT_VLLM_AB=baseline") and serves[1].startswith("+ LABKIT_VLLM_AB=merged")
    assert "--attention-backend TRITON_ATTN" in serves[0]
    assert "--host 127.0.0.1" in serves[0] and "--profiler-config" in serves[0] and "--max-model-len 16384" in serves[0]
    for flag in ("--dataset-name random-mm", "--num-prompts 128", "--max-concurrency 128",
                 "--random-mm-base-items-per-request 32", "--random-mm-num-mm-items-range-ratio 0",
                 "--backend openai-chat", "--ignore-eos", "--save-result", "--profile"):
        assert flag in benches[0], flag
    assert "1024" in benches[0] and "1536" in benches[0]
    assert "--trace-dir" in ingests[0] and "--variant baseline" in ingests[0]
    assert not (tmp_path / "runs").exists()  # a dry run creates nothing


@pytest.mark.parametrize("args,message", [
    (["--images", "0"], "--images must be a positive integer"),
    (["--num-prompts", "x"], "--num-prompts must be a positive integer"),
    (["--variants", "baseline,fast"], "unknown variant 'fast'"),
    (["--image-size", "1024"], "--image-size must look like"),
    (["--port", "70000"], "--port must be 1..65535"),
    (["--model"], "--model needs a value"),
    (["--frobnicate"], "unknown option '--frobnicate'"),
])
def test_ab_script_rejects_bad_arguments(args, message):
    out = _script("--dry-run", *args)
    assert out.returncode == 2
    assert message in out.stderr and out.stderr.count("\n") == 1
    assert out.stdout == ""


def test_ab_script_help():
    out = _script("--help")
    assert out.returncode == 0 and "--variants" in out.stdout and "--dry-run" in out.stdout
