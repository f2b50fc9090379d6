"""``labkit.vllm.ab`` patches the installed vLLM into the lab's baseline variants.

- ``placeholder="tensor"``: the patched ``PlaceholderRange`` behaves exactly like the
  lab's ``"tensor"`` variant (pre-#40143), edge cases included.
- ``prefix_range="per_layer"``: every read of ``TritonAttentionMetadata.mm_prefix_range_tensor``
  rebuilds the lab's per-layer (pre-#38794) tensor, equal in value to the per-step one;
  the per-step build in the metadata builder is skipped.
- Undo restores the installed behaviour; the plugin entry point reads ``LABKIT_VLLM_AB``.
"""

from __future__ import annotations

import random
from importlib.metadata import entry_points

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm.sh)")

import torch  # noqa: E402
import vllm.utils.torch_utils as vtu  # noqa: E402
from vllm.multimodal.inputs import PlaceholderRange  # noqa: E402
from vllm.v1.attention.backends import triton_attn  # noqa: E402
from vllm.v1.attention.backends.utils import compute_mm_prefix_range_tensor  # noqa: E402
from vllm_helpers import random_mask  # noqa: E402

from labkit.vllm import ab as vllm_ab  # noqa: E402
from labkit.attn.prefix_ranges import make_strategy  # noqa: E402
from labkit.mm.placeholder import PLACEHOLDER_VARIANTS  # noqa: E402
from test_prefix_ranges_vllm import random_ranges  # noqa: E402


def _outcome(fn, *args):
    try:
        value = fn(*args)
    except Exception as exc:  # noqa: BLE001
        return ("raise", type(exc))
    return ("ok", value, tuple(type(v) for v in value) if isinstance(value, tuple) else type(value))


def test_baseline_placeholder_behaves_like_lab_tensor_variant():
    lab_cls = PLACEHOLDER_VARIANTS["tensor"]
    rng = random.Random(5)
    with vllm_ab.patched_vllm("baseline"):
        for _ in range(300):
            length = rng.choice((0, 1, 2, rng.randint(3, 30)))
            mask = random_mask(rng, length)
            if length == 0 and mask is None:
                mask = torch.zeros(0, dtype=torch.bool)
            offset = rng.randint(0, 50)
            ours, theirs = lab_cls(offset, length, mask), PlaceholderRange(offset, length, mask)
            assert _outcome(ours.get_num_embeds) == _outcome(theirs.get_num_embeds)
            if mask is not None:
                assert isinstance(theirs.embeds_cumsum, torch.Tensor)
                assert torch.equal(ours.embeds_cumsum, theirs.embeds_cumsum)
            for s in range(-1, length + 2):
                for e in range(-1, length + 2):
                    assert _outcome(ours.get_embeds_indices_in_range, s, e) == _outcome(
                        theirs.get_embeds_indices_in_range, s, e), (offset, mask, s, e)
    # undone: post-#40143 again
    p = PlaceholderRange(0, 0, torch.zeros(0, dtype=torch.bool))
    assert p.get_num_embeds() == 0 and p.embeds_cumsum == []


def test_pr38794_variant_patches_only_the_placeholder():
    with vllm_ab.patched_vllm("pr38794"):
        assert isinstance(PlaceholderRange(0, 3, torch.ones(3, dtype=torch.bool)).embeds_cumsum, torch.Tensor)
        assert triton_attn.TritonAttentionMetadata.__dict__["mm_prefix_range_tensor"] is None
    with vllm_ab.patched_vllm("pr40143"):
        assert PlaceholderRange(0, 3, torch.ones(3, dtype=torch.bool)).embeds_cumsum == [1, 2, 3]
        assert isinstance(triton_attn.TritonAttentionMetadata.__dict__["mm_prefix_range_tensor"], property)
    with vllm_ab.patched_vllm("merged"):
        assert PlaceholderRange(0, 3, torch.ones(3, dtype=torch.bool)).embeds_cumsum == [1, 2, 3]
        assert triton_attn.TritonAttentionMetadata.__dict__["mm_prefix_range_tensor"] is None


def _metadata(seq_lens: torch.Tensor, ranges):
    z = torch.zeros(1)
    md = triton_attn.TritonAttentionMetadata(
        num_actual_tokens=int(seq_lens.numel()), max_query_len=1, query_start_loc=z, max_seq_len=int(seq_lens.max()),
        seq_lens=seq_lens, block_table=z, slot_mapping=z, seq_threshold_3D=0, num_par_softmax_segments=0,
        softmax_segm_output=z, softmax_segm_max=z, softmax_segm_expsum=z, causal=True,
    )
    md.mm_prefix_range = ranges
    md.mm_prefix_range_tensor = triton_attn.compute_mm_prefix_range_tensor(ranges, seq_lens.numel(), seq_lens.device)
    return md


def test_per_layer_tensor_is_rebuilt_on_every_read_and_equals_the_lab(monkeypatch):
    monkeypatch.setattr(vtu, "PIN_MEMORY", False)
    rng = random.Random(9)
    with vllm_ab.patched_vllm("baseline"):
        assert triton_attn.compute_mm_prefix_range_tensor(  # the per-step build is skipped
            {0: [(1, 4)]}, 1, torch.device("cpu")) is None
        checked = 0
        for _ in range(200):
            num_seqs = rng.randint(1, 10)
            ranges = random_ranges(rng, num_seqs)
            md = _metadata(torch.full((num_seqs,), 500, dtype=torch.int32), ranges)
            expected = compute_mm_prefix_range_tensor(ranges, num_seqs, torch.device("cpu"))  # per-step, unpatched
            lab = make_strategy("per_layer", "cpu")
            lab.begin_step(ranges, num_seqs)
            lab_tensor = lab.tensor_for_layer(0)
            first, second = md.mm_prefix_range_tensor, md.mm_prefix_range_tensor
            if expected is None:
                assert first is None and lab_tensor is None
                continue
            assert first is not second  # a fresh tensor per read: one build per layer
            assert first.dtype == torch.int32 and torch.equal(first, expected) and torch.equal(second, expected)
            assert torch.equal(lab_tensor, expected)
            checked += 1
            md.mm_prefix_range = None  # what Gemma 4 does on full-attention layers
            assert md.mm_prefix_range_tensor is None
        assert checked > 100
    assert triton_attn.compute_mm_prefix_range_tensor is compute_mm_prefix_range_tensor


def test_one_variant_at_a_time_and_unknown_names():
    restore = vllm_ab.apply_variant("baseline")
    try:
        with pytest.raises(RuntimeError, match="already applied"):
            vllm_ab.apply_variant("pr40143")
    finally:
        restore()
    with pytest.raises(ValueError, match="unknown vLLM A/B variant"):
        vllm_ab.apply_variant("fastest")


def test_plugin_entry_point_reads_the_environment(monkeypatch):
    eps = {ep.name: ep for ep in entry_points(group="vllm.general_plugins")}
    assert "labkit_vllm_ab" in eps, "pip install -e . into the vLLM env registers the plugin"
    plugin = eps["labkit_vllm_ab"].load()
    monkeypatch.delenv(vllm_ab.ENV_VAR, raising=False)
    plugin()
    assert vllm_ab.applied_variant() is None
    monkeypatch.setenv(vllm_ab.ENV_VAR, "baseline")
    try:
        plugin()
        plugin()  # vLLM may load plugins more than once per process
        assert vllm_ab.applied_variant() == "baseline"
        assert isinstance(PlaceholderRange(0, 2, torch.ones(2, dtype=torch.bool)).embeds_cumsum, torch.Tensor)
    finally:
        vllm_ab.reset_variant()
    assert vllm_ab.applied_variant() is None
