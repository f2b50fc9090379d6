"""The vLLM-facing helpers that need no vLLM: the shared CLI wrapper, the wheel comparison, the
torchvision import hook, and the CPU build's serving results (ingest, per-variant summary)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from labkit.errors import UsageError
from labkit.vllm.server import ab_results
from labkit.bench import add_grid_options, grid_from_args
from scripts.vllm_own.wheel_diff import LAB_SOURCES, compare_trees, installed_sources, wheel_sources

DATA = Path(__file__).resolve().parent / "data"


# -- the shared CLI helper -------------------------------------------------------------------

def test_the_grid_options():
    p = argparse.ArgumentParser()
    add_grid_options(p)
    args = p.parse_args(["--requests", "8", "16"])
    assert args.requests == [8, 16]
    assert grid_from_args(args, {"requests": (1,), "images": (2, 3)}) == {"requests": (8, 16), "images": (2, 3)}
    with pytest.raises(UsageError, match="1..256"):
        grid_from_args(p.parse_args(["--requests", "0"]), {"requests": (1,), "images": (1,)})


@pytest.mark.parametrize("argv", [["bench", "vllm-prefix-ranges", "--requests", "999"],
                                  ["bench", "vllm-sched", "--images", "0"],
                                  ["vllm", "check", "--model", "/nonexistent", "--variants", "fastest"],
                                  ["vllm", "check", "--model", "/nonexistent", "--image-size", "big"]])
def test_vllm_verbs_reject_bad_input_in_one_line(argv):
    out = subprocess.run([sys.executable, "-m", "labkit", *argv], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "error:" in out.stderr and "Traceback" not in out.stderr


# -- the wheel comparison --------------------------------------------------------------------

def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def test_compare_trees_sorts_every_file_and_flags_the_labs_sources(tmp_path):
    sched = LAB_SOURCES[0]
    official = _wheel(tmp_path / "vllm-9.9.9-py3-none-any.whl", {
        sched: b"same", "vllm/_version.py": b"9.9.9", "vllm/gpu_only.py": b"cuda", "vllm/data.json": b"{}",
        LAB_SOURCES[2]: b"official"})
    pkg = tmp_path / "site" / "vllm"
    (pkg / "v1/core/sched").mkdir(parents=True)
    (pkg / "multimodal").mkdir()
    (pkg / "__pycache__").mkdir()
    (pkg / "v1/core/sched/scheduler.py").write_bytes(b"same")
    (pkg / "_version.py").write_bytes(b"9.9.9+cpu")
    (pkg / "multimodal/inputs.py").write_bytes(b"repackaged")
    (pkg / "extra.py").write_bytes(b"new")
    (pkg / "__pycache__/x.py").write_bytes(b"ignored")
    d = compare_trees(installed_sources(pkg), wheel_sources(official))
    assert d.identical == [sched]
    assert d.differ == ["vllm/_version.py", LAB_SOURCES[2]]
    assert d.only_official == ["vllm/gpu_only.py"]  # .py only: data files are not compared
    assert d.only_installed == ["vllm/extra.py"]
    assert LAB_SOURCES[2] in d.lab_sources_differ and sched not in d.lab_sources_differ
    assert "DIFFER: " in "\n".join(d.lines())


# -- the torchvision import hook -------------------------------------------------------------

def test_torchvision_hook_declares_the_schemas_only_when_the_compiled_ops_cannot_load(tmp_path):
    # a stand-in torchvision whose import registers a fake kernel for torchvision::nms, as
    # torchvision 0.28's _meta_registrations does, with a _C library that cannot load
    pkg = tmp_path / "torchvision"
    pkg.mkdir()
    (pkg / "_C.so").write_bytes(b"not an ELF file")
    (pkg / "__init__.py").write_text(
        "import torch\n"
        "@torch.library.register_fake('torchvision::nms')\n"
        "def meta_nms(dets, scores, iou_threshold):\n"
        "    return dets.new_empty(0, dtype=torch.long)\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import labkit.vllm.torchvision_compat as c; "
            "c.install() if sys.argv[2] == '1' else None; import torch, torchvision; "
            "print(hasattr(torch.ops.torchvision, 'nms'), hasattr(torch.ops.torchvision, 'qnms'))")
    without = subprocess.run([sys.executable, "-c", code, str(tmp_path), "0"], capture_output=True, text=True)
    assert without.returncode != 0 and "torchvision::nms" in without.stderr
    with_hook = subprocess.run([sys.executable, "-c", code, str(tmp_path), "1"], capture_output=True, text=True)
    assert with_hook.returncode == 0, with_hook.stderr
    assert with_hook.stdout.split() == ["True", "True"]


def test_compiled_ops_load_is_false_for_a_broken_or_missing_library(tmp_path):
    from labkit.vllm.torchvision_compat import compiled_ops_load

    assert compiled_ops_load(tmp_path) is False
    (tmp_path / "_C.so").write_bytes(b"junk")
    assert compiled_ops_load(tmp_path) is False


# -- the CPU build's serving results ---------------------------------------------------------

def _bench(tmp_path, name, tpot_ms, duration):
    bench = json.loads((DATA / "vllm_bench_merged.json").read_text())
    bench.update(mean_tpot_ms=tpot_ms, median_tpot_ms=tpot_ms, duration=duration)
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(bench))
    return p


def test_cpu_ingest_files_measured_cpu_rows_per_repeat(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_DEVICE", "cpu")
    from labkit.device import describe_machine

    describe_machine.cache_clear()
    model = tmp_path / "model"
    model.mkdir()
    (model / "labkit_model.json").write_text('{"arch": "gemma4"}')
    runs = [("baseline", 1, 1, 6.2), ("merged", 1, 2, 5.2), ("merged", 2, 3, 5.0), ("baseline", 2, 4, 6.0)]
    shape = {"image_size": "64x96", "input_len": 16, "output_len": 64}
    try:
        for variant, rep, order, tpot in runs:
            path = ab_results.ingest(_bench(tmp_path, f"{variant}{rep}", tpot, 10.0 + order), variant=variant,
                                     images=16, model=str(model), repeat=rep, order=order, device="cpu",
                                     shape=shape, results_root=tmp_path / "res")
    finally:
        describe_machine.cache_clear()
    doc = json.loads(path.read_text())
    assert doc["source"] == "measured-cpu" and doc["params"]["device"] == "cpu"
    assert doc["params"]["model_arch"] == "gemma4" and len(doc["params"]["model_config_hash"]) == 16
    assert doc["params"]["shape"] == {**shape, "num_prompts": doc["rows"][0]["num_prompts"], "images": 16}
    assert "no multimodal prefix ranges" in doc["params"]["prefix_ranges"]
    assert [(r["variant"], r["repeat"], r["order"]) for r in doc["rows"]] == [(v, r, o) for v, r, o, _ in runs]
    table = ab_results.variant_summary(doc["rows"]).set_index("variant")
    assert table.loc["baseline", "repeats"] == 2
    assert table.loc["baseline", "mean_tpot_us"] == pytest.approx(6100.0)  # median of 6.2 and 6.0 ms
    assert table.loc["baseline", "mean_tpot_us_spread"] == pytest.approx(200.0)
    assert table.loc["merged", "duration_s_max"] == pytest.approx(13.0)
    assert bool(table.loc["baseline", "tpot_above_merged_all"]) and not bool(table.loc["merged", "tpot_above_merged_all"])


def test_summary_says_when_a_repeat_of_the_baseline_is_not_above_merged():
    rows = [{"variant": "baseline", "mean_tpot_us": 5.1}, {"variant": "baseline", "mean_tpot_us": 7.0},
            {"variant": "merged", "mean_tpot_us": 5.0}, {"variant": "merged", "mean_tpot_us": 5.5}]
    table = ab_results.variant_summary(rows).set_index("variant")
    assert not bool(table.loc["baseline", "tpot_above_merged_all"])  # 5.1 < merged's 5.5
