"""labkit.vllm.ab without vLLM: variants, the pre-PR code it patches in, ingestion, the A/B script.

The patches themselves are checked against a real vLLM in tests/vllm_conformance/.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from labkit.vllm import ab as vllm_ab
from labkit.vllm.server import ab_results as vllm_ab_results
from labkit.attn.prefix_ranges import build_prefix_range_tensor
from labkit.errors import UsageError
from labkit.mm.encoder_cache import EncoderCacheManager
from labkit.mm.scheduler import schedule_encoder_inputs
from labkit.mm.workload import make_request
from labkit.results import VLLM_AB, find_all
from labkit.vllm.sched020 import try_schedule_encoder_inputs_v020

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "vllm_ab.sh"


def test_importing_does_not_import_vllm():
    code = ("import sys, labkit.vllm.ab, labkit.vllm.server.ab_results, labkit.vllm.census.bench_vllm_prefix_ranges, "
            "labkit.vllm.conformance.cli, labkit.vllm.conformance.models, labkit.vllm.conformance.engine, "
            "labkit.vllm.conformance.check, labkit.vllm.torchvision_compat, "
            "labkit.vllm.sched020; print('vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_variants_cover_both_prs_both_ways():
    combos = {(v.placeholder, v.prefix_range) for v in vllm_ab.VARIANTS.values()}
    assert combos == {("tensor", "per_layer"), ("list", "per_layer"), ("tensor", "per_step"), ("list", "per_step")}
    assert vllm_ab.get_variant("baseline").placeholder == "tensor"
    assert vllm_ab.get_variant("merged").prefix_range == "per_step"
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
    assert row["variant"] == "baseline" and row["placeholder"] == "tensor" and row["prefix_range"] == "per_layer"
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
    (res,) = find_all(VLLM_AB, machine="h200", root=results)
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
    from labkit.cli import main as labkit_main

    rc = labkit_main(["vllm", "ab", "ingest", "--variant", "merged", "--bench-json", str(DATA / "vllm_bench_merged.json"),
                       "--images", "32", "--gpu-name", "NVIDIA H200", "--results-root", str(tmp_path),
                       "--json", str(tmp_path / "row.json")])
    assert rc == 0
    assert "3146.8 tok/s" in capsys.readouterr().out
    assert json.loads((tmp_path / "row.json").read_text())["mean_tpot_us"] == pytest.approx(24580.0)
    rc = labkit_main(["vllm", "ab", "ingest", "--variant", "fastest", "--bench-json", str(DATA / "vllm_bench_merged.json"),
                       "--gpu-name", "NVIDIA H200", "--results-root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "unknown vLLM A/B variant" in err
    assert labkit_main(["vllm", "ab", "variants"]) == 0
    assert "baseline" in capsys.readouterr().out
    assert labkit_main(["vllm", "ab", "bogus"]) == 2


def _script(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO, timeout=60)


def test_ab_script_dry_run_prints_the_pr_benchmark_commands(tmp_path):
    out = _script("--dry-run", "--device", "cuda", "--variants", "baseline,merged", "--profile",
                  "--out", str(tmp_path / "runs"), "--python", "python3", "--", "--max-model-len", "16384")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    serves = [line for line in lines if " serve " in line and " bench serve " not in line]
    benches = [line for line in lines if " bench serve " in line]
    ingests = [line for line in lines if "labkit vllm ab ingest" in line]
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
    out = _script("--dry-run", "--device", "cuda", *args)
    assert out.returncode == 2
    assert message in out.stderr and out.stderr.count("\n") == 1
    assert out.stdout == ""


def test_ab_script_on_a_cpu_chooses_the_cpu_builds_flags_and_alternates(tmp_path):
    out = _script("--dry-run", "--device", "cpu", "--model", str(tmp_path / "made"), "--repeats", "2",
                  "--variants", "baseline,merged,early-return", "--python", "python3")
    assert out.returncode == 0, out.stderr
    serves = [line for line in out.stdout.splitlines() if " serve " in line and " bench serve " not in line]
    order = [line.split()[1].split("=")[1] for line in serves]
    # repeat 1 forward, repeat 2 reversed
    assert order == ["baseline", "merged", "early-return", "early-return", "merged", "baseline"]
    for flag in ("--load-format dummy", "--no-enable-prefix-caching", "--mm-processor-cache-gb 0", "--enforce-eager",
                 "--max-num-seqs 32"):
        assert flag in serves[0], flag
    assert "--attention-backend" not in serves[0]
    benches = [line for line in out.stdout.splitlines() if " bench serve " in line]
    assert r"\(64\,\ 96\,\ 1\)" in benches[0] and "--random-input-len 16" in benches[0]
    ingests = [line for line in out.stdout.splitlines() if "labkit vllm ab ingest" in line]
    assert "--device cpu" in ingests[0] and "--repeat 2 --order 6" in ingests[-1]


def test_ab_script_timeline_times_requests_and_steps_and_files_them_apart(tmp_path):
    base = ("--dry-run", "--device", "cpu", "--model", str(tmp_path), "--repeats", "1", "--variants", "baseline",
            "--python", "python3")
    for extra, on in (((), False), (("--timeline",), True)):
        out = _script(*base, *extra)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        serve = next(line for line in lines if " serve " in line and " bench serve " not in line)
        bench = next(line for line in lines if " bench serve " in line)
        ingest = next(line for line in lines if "labkit vllm ab ingest" in line)
        assert ("--enable-logging-iteration-details" in serve, "--save-detailed" in bench,
                "--server-log" in ingest and "/r1/baseline/server.log" in ingest) == (on, on, on), lines


def test_ab_script_runs_pixtral_at_the_pr_counts_on_a_cpu(tmp_path):
    (tmp_path / "labkit_model.json").write_text('{"arch": "pixtral-llava"}')
    out = _script("--dry-run", "--device", "cpu", "--model", str(tmp_path), "--repeats", "1", "--python", "python3")
    assert out.returncode == 0, out.stderr
    bench = next(line for line in out.stdout.splitlines() if " bench serve " in line)
    for flag in ("--num-prompts 128", "--random-mm-base-items-per-request 32", "--random-output-len 128"):
        assert flag in bench, flag
    assert r"\(64\,\ 64\,\ 1\)" in bench


@pytest.mark.parametrize("args,message", [
    (["--variants", "baseline,pr38794"], "no multimodal prefix ranges"),
    ([], "--model must name a folder made by"),
])
def test_ab_script_on_a_cpu_refuses_what_does_not_apply(args, message, tmp_path):
    model = [] if not args else ["--model", str(tmp_path)]
    out = _script("--dry-run", "--device", "cpu", *model, *args)
    assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1


def test_ab_script_help():
    out = _script("--help")
    assert out.returncode == 0 and "--variants" in out.stdout and "--dry-run" in out.stdout


# -- vLLM 0.20's loop for vLLM >= 0.21 (labkit.vllm.sched020), against the lab's 0.20 model ----

class _CountingCache(EncoderCacheManager):
    """The lab's cache (0.20 semantics) plus the one query 0.33's cache adds."""

    def get_cached_num_encoder_embeds(self, request, input_id):
        ident = request.mm_features[input_id].identifier
        return request.get_num_encoder_embeds(input_id) if ident in self.cached else None


def _scheduler_stub(cache, no_chunk):
    stub = SimpleNamespace(is_encoder_decoder=False, encoder_cache_manager=cache, ec_connector=None,
                           scheduler_config=SimpleNamespace(disable_chunked_mm_input=no_chunk))
    stub._reject_on_encoder_cache_embed_mismatch = lambda *args: False
    return stub


def test_sched020_loop_matches_the_lab_020_model_on_random_calls():
    rng = random.Random(3)
    checked = 0
    for _ in range(300):
        no_chunk, shift = rng.random() < 0.3, rng.choice((0, 0, 1))
        pool = [(f"i{k}", rng.randint(1, 12)) for k in range(rng.randint(1, 4))]
        positions, idents, pos = [], [], rng.randint(0, 6)
        for _ in range(rng.randint(1, 6)):
            ident, length = rng.choice(pool)
            positions.append((pos, length))
            idents.append(ident)
            pos += length + rng.randint(0, 5)
        a = make_request("a", pos + 5, positions, identifiers=idents)
        b = make_request("a", pos + 5, positions, identifiers=idents)
        size, budget = rng.choice((0, 6, 20, 100)), rng.choice((0, 6, 20, 100))
        lab_cache, ext_cache = EncoderCacheManager(size), _CountingCache(size)
        nc = 0
        while nc < pos + 5:
            nn = rng.randint(1, 15)
            want = schedule_encoder_inputs(a, nc, nn, budget, lab_cache, shift_computed_tokens=shift,
                                           disable_chunked_mm_input=no_chunk)
            got = try_schedule_encoder_inputs_v020(_scheduler_stub(ext_cache, no_chunk), b, nc, nn, budget, shift)
            assert got[:3] == want and got[3] == []
            # duplicates: later items with an identifier chosen in this call and inside the window
            assert all(idents[i] in {idents[j] for j in got[0]} for i in got[4])
            for i in want[0]:
                lab_cache.allocate(a, i)
                ext_cache.allocate(b, i)
            checked += 1
            if want[1] == 0:
                break
            nc += want[1]
    assert checked > 500


def test_sched020_reports_same_call_duplicates_in_a_fifth_list():
    # A at [0, 4) and [10, 14), B at [5, 8): one call over [0, 20) encodes A and B once,
    # the second A is a duplicate (0.33's caller registers it with the cache)
    req = make_request("r", 30, [(0, 4), (5, 3), (10, 4)], identifiers=["A", "B", "A"])
    stub = _scheduler_stub(_CountingCache(100), False)
    assert try_schedule_encoder_inputs_v020(stub, req, 0, 20, 100, 0) == ([0, 1], 20, 93, [], [2])


def test_sched020_visits_every_item_in_decode():
    # decode after the prompt: every item is read (get_num_embeds first) and skipped
    req = make_request("r", 100, [(10 * k, 5) for k in range(8)])
    reads = []

    class Counted:
        def __init__(self, pos):
            self.pos, self.offset, self.length = pos, pos.offset, pos.length

        def get_num_embeds(self):
            reads.append(self.offset)
            return self.pos.get_num_embeds()

    req.mm_features = [SimpleNamespace(identifier=f.identifier, mm_position=Counted(f.mm_position))
                       for f in req.mm_features]
    stub = _scheduler_stub(_CountingCache(100), False)
    assert try_schedule_encoder_inputs_v020(stub, req, 100, 1, 100, 0) == ([], 1, 100, [], [])
    assert reads == [10 * k for k in range(8)]


def test_sched020_skips_an_image_whose_last_token_was_just_computed():
    # an image at [2, 6) and 6 tokens computed: it lies wholly in the KV cache, its encoder output already
    # freed and no encoder budget left. 0.20 skips it and schedules the decode token; an image still
    # counted as ahead would ask the cache for room, get none, and cut the step to 0 tokens
    req = make_request("r", 20, [(2, 4)])
    stub = _scheduler_stub(_CountingCache(100), False)
    assert try_schedule_encoder_inputs_v020(stub, req, 6, 1, 0, 0) == ([], 1, 0, [], [])
    assert schedule_encoder_inputs(make_request("r", 20, [(2, 4)]), 6, 1, 0, EncoderCacheManager(100)) == ([], 1, 0)
    # one token earlier its last token is still to compute: the same call cannot place it
    assert try_schedule_encoder_inputs_v020(stub, req, 5, 1, 0, 0)[:2] == ([], 0)


# -- the version gate, on stand-in vLLM module trees (0.20 layout vs older) ---------------------

def _fake_vllm(monkeypatch, *, per_step_on_class: bool, window: bool):
    """A minimal module tree with the names the patches touch, laid out as vLLM 0.20 (the
    per-step build is a static method of the metadata class) or older (no per-step build)."""
    import types
    from dataclasses import dataclass
    from functools import cached_property

    @dataclass(frozen=True)
    class PlaceholderRange:
        offset: int
        length: int
        is_embed: object = None

        @cached_property
        def embeds_cumsum(self):
            return None if self.is_embed is None else self.is_embed.cumsum(0).tolist()

        def get_num_embeds(self):
            return self.length if self.embeds_cumsum is None else self.embeds_cumsum[-1]

        def get_embeds_indices_in_range(self, s, e):
            return s, e

    class TritonAttentionMetadata:
        pass

    if per_step_on_class:
        TritonAttentionMetadata.compute_mm_prefix_range_tensor = staticmethod(lambda r, n, d: "per-step")

    class Scheduler:
        def _try_schedule_encoder_inputs(self, *args):
            return "installed"

    mods = {name: types.ModuleType(name) for name in (
        "vllm", "vllm.multimodal", "vllm.multimodal.inputs", "vllm.v1", "vllm.v1.attention",
        "vllm.v1.attention.backends", "vllm.v1.attention.backends.triton_attn", "vllm.v1.core",
        "vllm.v1.core.sched", "vllm.v1.core.sched.scheduler")}
    mods["vllm.multimodal.inputs"].PlaceholderRange = PlaceholderRange
    mods["vllm.v1.attention.backends.triton_attn"].TritonAttentionMetadata = TritonAttentionMetadata
    mods["vllm.v1.attention.backends"].triton_attn = mods["vllm.v1.attention.backends.triton_attn"]
    mods["vllm.v1.core.sched.scheduler"].Scheduler = Scheduler
    if window:
        mods["vllm.v1.core.sched.scheduler"].get_mm_features_in_window = lambda *a: (0, 0)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return PlaceholderRange, TritonAttentionMetadata, Scheduler


def test_variants_apply_on_vllm_020_layout(monkeypatch):
    ph, md, sched = _fake_vllm(monkeypatch, per_step_on_class=True, window=False)
    with vllm_ab.patched_vllm("baseline"):
        assert md.compute_mm_prefix_range_tensor({0: [(1, 2)]}, 1, "cpu") is None  # per-step build off
        assert isinstance(md.__dict__["mm_prefix_range_tensor"], property)
        assert sched._try_schedule_encoder_inputs is sched.__dict__["_try_schedule_encoder_inputs"]
        assert sched()._try_schedule_encoder_inputs() == "installed"  # 0.20 already has the loop
        p = ph(0, 3, torch.tensor([True, False, True]))
        assert p.get_num_embeds() == 2 and isinstance(p.embeds_cumsum, torch.Tensor)
    assert md.compute_mm_prefix_range_tensor({0: [(1, 2)]}, 1, "cpu") == "per-step"
    assert "mm_prefix_range_tensor" not in md.__dict__
    assert "embeds_cumsum" not in p.__dict__ and p.get_num_embeds() == 2 and p.embeds_cumsum == [1, 1, 2]


def test_window_scheduler_gets_the_020_loop(monkeypatch):
    _, _, sched = _fake_vllm(monkeypatch, per_step_on_class=True, window=True)
    with vllm_ab.patched_vllm("pr38794"):  # #40143 reverted, #38794 kept
        assert sched._try_schedule_encoder_inputs is try_schedule_encoder_inputs_v020
    assert sched()._try_schedule_encoder_inputs() == "installed"


def test_the_arms_of_40143_both_run_the_020_loop_and_merged_keeps_the_window(monkeypatch):
    ph, _, sched = _fake_vllm(monkeypatch, per_step_on_class=True, window=True)
    mask = torch.tensor([True, False, True])
    # (variant, cumsum type, scheduler method): #40143's two arms differ only in the cumsum
    for name, cumsum_type, loop in (("baseline", torch.Tensor, True), ("pr40143", list, True),
                                    ("merged", list, False)):
        with vllm_ab.patched_vllm(name):
            assert isinstance(ph(0, 3, mask).embeds_cumsum, cumsum_type), name
            method = sched.__dict__.get("_try_schedule_encoder_inputs")
            assert (method is try_schedule_encoder_inputs_v020) == loop, name
        assert sched()._try_schedule_encoder_inputs() == "installed"
    assert vllm_ab.get_variant("pr40143").scheduler == "loop"
    assert vllm_ab.get_variant("merged").scheduler == "window"


def test_per_layer_variant_refuses_a_vllm_without_a_per_step_build(monkeypatch):
    _fake_vllm(monkeypatch, per_step_on_class=False, window=False)
    with pytest.raises(RuntimeError, match="predates #38794"):
        vllm_ab.apply_variant("pr40143")
    assert vllm_ab.applied_variant() is None


def test_early_return_variant_wraps_the_window_scheduler(monkeypatch):
    _, _, sched = _fake_vllm(monkeypatch, per_step_on_class=True, window=True)
    assert vllm_ab.get_variant("early-return").early_return
    with vllm_ab.patched_vllm("early-return"):
        method = sched.__dict__["_try_schedule_encoder_inputs"]
        assert getattr(method, "labkit_early_return", False)
        stub = SimpleNamespace(is_encoder_decoder=False)
        done = SimpleNamespace(mm_features=[SimpleNamespace(mm_position=SimpleNamespace(offset=2, length=4))])
        assert method(stub, done, 6, 1, 50) == ([], 1, 50, [], [])  # every item computed: early return
        assert method(stub, done, 5, 1, 50) == "installed"  # item still ahead: the installed method
    assert sched()._try_schedule_encoder_inputs() == "installed"
    _fake_vllm(monkeypatch, per_step_on_class=True, window=False)
    with pytest.raises(RuntimeError, match=">= 0.21"):
        vllm_ab.apply_variant("early-return")
    assert vllm_ab.applied_variant() is None
