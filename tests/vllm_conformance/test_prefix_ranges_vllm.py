"""Prefix ranges: the lab's builders against the installed vLLM's functions.

- ``labkit.attn.prefix_ranges.build_prefix_range_tensor`` == vLLM's
  ``compute_mm_prefix_range_tensor`` (``vllm/v1/attention/backends/utils.py``; pinned
  staging switched off on CPU via ``vllm.utils.torch_utils.PIN_MEMORY = False``).
- The next-bubble patch (cached embedding runs) leaves ``compute_mm_prefix_ranges``'s
  results unchanged.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm.sh)")

import torch  # noqa: E402
import vllm.utils.torch_utils as vtu  # noqa: E402
from vllm.multimodal.inputs import PlaceholderRange  # noqa: E402
from vllm.v1.attention.backends.utils import compute_mm_prefix_range_tensor, compute_mm_prefix_ranges  # noqa: E402

from labkit.vllm.census import bench_vllm_prefix_ranges  # noqa: E402
from labkit.attn.prefix_ranges import build_prefix_range_tensor  # noqa: E402


@pytest.fixture(autouse=True)
def _no_pinned_memory(monkeypatch):
    monkeypatch.setattr(vtu, "PIN_MEMORY", False)


def random_ranges(rng: random.Random, num_seqs: int):
    """A ``{row: [(start, end), ...]}`` dict like the model runner builds (rows may be missing)."""
    out = {}
    for row in range(num_seqs):
        kind = rng.random()
        if kind < 0.2:
            continue  # missing row
        if kind < 0.35:
            out[row] = []
            continue
        ranges, pos = [], rng.randint(0, 30)
        for _ in range(rng.randint(1, 6)):
            length = rng.randint(0, 40)
            ranges.append((pos, pos + length))
            pos += length + rng.randint(1, 20)
        out[row] = ranges
    if rng.random() < 0.05:
        out = {row: [(0, 0)] for row in range(num_seqs)}  # every row trivial
    return out


def test_build_prefix_range_tensor_matches_vllm():
    rng = random.Random(0)
    nonnull = 0
    for _ in range(400):
        num_seqs = rng.randint(0, 12)
        ranges = random_ranges(rng, num_seqs)
        theirs = compute_mm_prefix_range_tensor(ranges, num_seqs, torch.device("cpu"))
        ours = build_prefix_range_tensor(ranges, num_seqs, "cpu")
        if theirs is None:
            assert ours is None, (ranges, num_seqs)
            continue
        nonnull += 1
        assert ours.dtype == theirs.dtype == torch.int32
        assert ours.shape == theirs.shape
        assert torch.equal(ours, theirs), (ranges, num_seqs)
    assert nonnull > 200


def _edge_ranges(rng: random.Random, num_seqs: int):
    """Inputs vLLM's function takes beyond what its runner builds: keys outside the batch,
    end < start (an empty placeholder), negative positions, floats, tuple rows, lists of
    lists, odd pair lengths, values beyond int32."""
    out = {}
    for key in range(-2, max(num_seqs, 0) + 3):
        if rng.random() < 0.4:
            continue
        row = []
        for _ in range(rng.randint(0, 4)):
            kind = rng.random()
            a = rng.randint(-5, 60)
            if kind < 0.15:
                pair = (a, a - rng.randint(1, 3))  # end before start
            elif kind < 0.2:
                pair = (float(a), a + 2)
            elif kind < 0.25:
                pair = [a, a + 1]
            elif kind < 0.28:
                pair = (a, a + 1, a + 2)
            elif kind < 0.3:
                pair = (2**31 + a, 0)
            else:
                pair = (a, a + rng.randint(0, 20))
            row.append(pair)
        out[key] = tuple(row) if rng.random() < 0.1 else row
    return out


def _outcome(fn, *args):
    try:
        t = fn(*args)
    except Exception as exc:  # noqa: BLE001
        return ("raise", type(exc))
    return ("none",) if t is None else ("ok", t.dtype, tuple(t.shape), t.tolist())


def test_same_result_or_same_exception_on_vllms_whole_input_domain():
    rng = random.Random(11)
    kinds = {}
    for _ in range(600):
        num_seqs = rng.randint(-1, 10)
        ranges = _edge_ranges(rng, num_seqs)
        theirs = _outcome(compute_mm_prefix_range_tensor, ranges, num_seqs, torch.device("cpu"))
        ours = _outcome(build_prefix_range_tensor, ranges, num_seqs, "cpu")
        assert ours == theirs, (ranges, num_seqs)
        kinds[theirs[0]] = kinds.get(theirs[0], 0) + 1
    assert kinds.get("ok", 0) > 200 and kinds.get("raise", 0) > 20 and kinds.get("none", 0) > 10, kinds


def test_ranges_for_batch_sliding_window_drop_matches_vllm():
    # the drop rule of vLLM 0.20.0's runner (#40534) lives on in compute_mm_prefix_ranges
    from labkit.attn.prefix_ranges import ranges_for_batch
    from labkit.mm.placeholder import ListPlaceholderRange
    from labkit.mm.workload import MMFeature, Request

    rng = random.Random(12)
    for _ in range(200):
        lab_reqs, vllm_feats = [], []
        for r in range(rng.randint(1, 5)):
            lab_row, vl_row, pos = [], [], rng.randint(0, 9)
            for k in range(rng.randint(0, 4)):
                length = rng.randint(1, 40)
                mask = None if rng.random() < 0.3 else torch.tensor([rng.random() < 0.8 for _ in range(length)])
                lab_row.append(MMFeature(f"i{r}-{k}", ListPlaceholderRange(pos, length, mask)))
                vl_row.append(bench_vllm_prefix_ranges._vllm_feature(modality="image", identifier=f"i{r}-{k}",
                                                       mm_position=PlaceholderRange(pos, length, mask)))
                pos += length + rng.randint(0, 6)
            lab_reqs.append(Request(f"r{r}", pos + 2, 1, lab_row))
            vllm_feats.append(vl_row)
        window = rng.choice((None, 1, 4, 16, 33))
        theirs = compute_mm_prefix_ranges(vllm_feats, sliding_window=window)
        ours = ranges_for_batch(lab_reqs, sliding_window=window)
        assert {i: row for i, row in enumerate(ours)} == theirs


def test_none_ranges_give_none_on_both_sides():
    assert compute_mm_prefix_range_tensor(None, 4, torch.device("cpu")) is None
    assert build_prefix_range_tensor(None, 4, "cpu") is None


def test_padding_rows_hand_worked():
    # row 1 missing, row 2 empty, rows 3.. padding: all become (0, 0)
    ranges = {0: [(5, 9), (20, 30)], 2: []}
    expected = torch.tensor([[[5, 9], [20, 30]], [[0, 0], [0, 0]], [[0, 0], [0, 0]], [[0, 0], [0, 0]]], dtype=torch.int32)
    assert torch.equal(compute_mm_prefix_range_tensor(ranges, 4, torch.device("cpu")), expected)
    assert torch.equal(build_prefix_range_tensor(ranges, 4, "cpu"), expected)


def test_next_bubble_patch_keeps_compute_mm_prefix_ranges_results():
    assert bench_vllm_prefix_ranges.check_patch(cases=300, seed=1) == 300


def test_next_bubble_patch_is_undone():
    before = PlaceholderRange.__dict__["extract_embeds_range"]
    with bench_vllm_prefix_ranges.patched_placeholder(PlaceholderRange):
        p = PlaceholderRange(2, 5, torch.tensor([False, True, False, True, True]))
        first = p.extract_embeds_range()
        first.append((99, 99))  # callers may mutate what they get
        assert p.extract_embeds_range() == [(3, 3), (5, 6)]
        assert bench_vllm_prefix_ranges.CACHE_ATTR in vars(p)
    assert PlaceholderRange.__dict__["extract_embeds_range"] is before
    assert not hasattr(PlaceholderRange, bench_vllm_prefix_ranges.CACHE_ATTR)


def test_gemma_workload_ranges_hand_worked():
    feats = bench_vllm_prefix_ranges.make_features(2, 2, placeholder_cls=PlaceholderRange,
                                     feature_factory=bench_vllm_prefix_ranges._vllm_feature, placeholder_len=10, text_between=4)
    # placeholders at 4..13 and 18..27, embeds at offset+1 .. offset+8
    assert compute_mm_prefix_ranges(feats) == {0: [(5, 12), (19, 26)], 1: [(5, 12), (19, 26)]}


def test_patch_file_applies_to_the_installed_vllm_and_keeps_results(tmp_path, monkeypatch):
    """patches/*.diff applies cleanly to the installed inputs.py; the patched class gives
    the same ``compute_mm_prefix_ranges`` results and caches its runs."""
    import importlib.util
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import vllm.multimodal.inputs as vinputs

    if shutil.which("patch") is None:
        pytest.skip("the `patch` tool is not installed")
    diff = Path(__file__).resolve().parents[2] / "patches" / "vllm-0.33.0-cache-embeds-ranges.diff"
    target = tmp_path / "vllm" / "multimodal" / "inputs.py"
    target.parent.mkdir(parents=True)
    shutil.copy(vinputs.__file__, target)
    done = subprocess.run(["patch", "-p1", "-i", str(diff)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    spec = importlib.util.spec_from_file_location("vllm.multimodal._labkit_patched_inputs", target)
    patched = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, patched)  # dataclasses look their module up
    spec.loader.exec_module(patched)
    rng = random.Random(4)
    for case in range(200):
        state = rng.getstate()
        before = compute_mm_prefix_ranges(bench_vllm_prefix_ranges.make_random_features(
            rng, placeholder_cls=PlaceholderRange, feature_factory=bench_vllm_prefix_ranges._vllm_feature))
        rng.setstate(state)
        feats = bench_vllm_prefix_ranges.make_random_features(rng, placeholder_cls=patched.PlaceholderRange,
                                                feature_factory=bench_vllm_prefix_ranges._vllm_feature)
        assert compute_mm_prefix_ranges(feats) == before
        assert compute_mm_prefix_ranges(feats) == before  # second step: from the cache
        for f in (f for row in feats for f in row if f.modality in ("image", "video")):
            assert "_embeds_ranges" in vars(f.mm_position)
