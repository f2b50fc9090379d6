"""Synthetic multimodal workloads: layouts, presets, seeds, duplicates and validation."""

from __future__ import annotations

import pytest
import torch

from labkit.errors import UsageError
from labkit.mm.placeholder import PLACEHOLDER_VARIANTS
from labkit.mm.workload import (IMAGE_LAYOUTS, WORKLOAD_PRESETS, MMFeature, Request, WorkloadSpec,
                                get_workload_spec, make_request, make_requests, placeholder_layout)


def test_pr40143_shape():
    spec = get_workload_spec("pr40143")
    reqs = make_requests(spec, "fast")
    assert len(reqs) == 128
    assert all(len(r.mm_features) == 32 for r in reqs)
    r = reqs[0]
    # 512 text + 32 x (258 placeholder + 8 text) + 256 text
    assert r.prompt_len == 512 + 32 * 266 + 256 == 9280
    assert r.output_len == 8000
    pos = r.mm_features[0].mm_position
    assert (pos.offset, pos.length) == (512, 258)
    assert pos.is_embed[0].item() is False and pos.is_embed[-1].item() is False
    assert int(pos.is_embed.sum()) == 256 and pos.get_num_embeds() == 256
    assert r.mm_features[1].mm_position.offset == 512 + 266
    assert pos.extract_embeds_range() == [(513, 768)]
    # every image distinct (no duplicates asked for)
    assert len({f.identifier for q in reqs for f in q.mm_features}) == 128 * 32


def test_plain_model_size_rule_and_no_mask():
    assert IMAGE_LAYOUTS["plain"].tokens_for_size(1024, 1536) == 37 * 55  # ceil(1024/28) x ceil(1536/28)
    assert IMAGE_LAYOUTS["plain"].tokens_for_size(28, 29) == 2
    assert IMAGE_LAYOUTS["gemma"].tokens_for_size(1024, 1536) == 256
    spec = WorkloadSpec(2, 3, image_size=(56, 84), model="plain")
    r = make_requests(spec)[0]
    assert [f.mm_position.length for f in r.mm_features] == [6, 6, 6]
    assert all(f.mm_position.is_embed is None for f in r.mm_features)
    with pytest.raises(UsageError):
        IMAGE_LAYOUTS["plain"].tokens_for_size(0, 10)


def test_placeholder_layout_gemma():
    length, mask = placeholder_layout("gemma", 3)
    assert length == 5 and mask.tolist() == [False, True, True, True, False]
    assert placeholder_layout("plain", 3) == (3, None)


def test_same_spec_same_layout_for_every_variant():
    spec = get_workload_spec("dup")
    layouts = []
    for v in PLACEHOLDER_VARIANTS:
        reqs = make_requests(spec, v)
        layouts.append([(r.prompt_len, r.output_len,
                         [(f.identifier, f.mm_position.offset, f.mm_position.length,
                           None if f.mm_position.is_embed is None else f.mm_position.is_embed.tolist())
                          for f in r.mm_features]) for r in reqs])
    assert layouts[0] == layouts[1] == layouts[2]
    assert type(make_requests(spec, "tensor")[0].mm_features[0].mm_position).__name__ == "TensorPlaceholderRange"


def test_seed_changes_draws():
    a = make_requests(get_workload_spec("dup"))
    b = make_requests(get_workload_spec("dup").with_(seed=1))
    assert [len(r.mm_features) for r in a] != [len(r.mm_features) for r in b] or \
        [r.output_len for r in a] != [r.output_len for r in b]


def test_duplicates_repeat_identifier_and_size():
    spec = WorkloadSpec(20, 6, tokens_per_image=(4, 40), duplicate_image_prob=0.5, seed=3)
    reqs = make_requests(spec)
    sizes = {}
    within = 0
    for r in reqs:
        ids = [f.identifier for f in r.mm_features]
        within += len(ids) - len(set(ids))
        for f in r.mm_features:
            sizes.setdefault(f.identifier, set()).add(f.mm_position.get_num_embeds())
    assert within > 0  # duplicates inside one request
    assert any(len(s) == 1 for s in sizes.values())
    assert all(len(s) == 1 for s in sizes.values())  # a repeated image has the same size
    across = {f.identifier for r in reqs[:10] for f in r.mm_features} & \
             {f.identifier for r in reqs[10:] for f in r.mm_features}
    assert across  # and across requests
    none = make_requests(spec.with_(duplicate_image_prob=0.0))
    ids = [f.identifier for r in none for f in r.mm_features]
    assert len(ids) == len(set(ids))


def test_ranges_drawn_within_bounds():
    spec = WorkloadSpec(30, (0, 3), tokens_per_image=(2, 5), output_len=(1, 4), seed=7)
    reqs = make_requests(spec)
    assert {len(r.mm_features) for r in reqs} <= {0, 1, 2, 3}
    assert any(not r.has_encoder_inputs for r in reqs)
    assert all(1 <= r.output_len <= 4 for r in reqs)
    assert all(2 <= f.mm_position.get_num_embeds() <= 5 for r in reqs for f in r.mm_features)


@pytest.mark.parametrize("bad", [
    dict(num_requests=0), dict(images_per_request=(3, 1)), dict(images_per_request=-1),
    dict(output_len=0), dict(model="nope"), dict(duplicate_image_prob=1.5),
    dict(prefix_text_tokens=0, suffix_text_tokens=0), dict(tokens_per_image=(1, 2, 3)),
])
def test_spec_validation(bad):
    with pytest.raises(UsageError):
        WorkloadSpec(**{"num_requests": 2, "images_per_request": 1, **bad})


def test_presets_and_unknown():
    assert {"pr40143", "quick", "small", "tiny", "dup"} <= set(WORKLOAD_PRESETS)
    with pytest.raises(UsageError, match="unknown workload"):
        get_workload_spec("nope")


def test_request_state_and_validation():
    r = make_request("r", 50, [(10, 20), (30, 5)], output_len=3, variant="fast")
    assert r.has_encoder_inputs and r.num_encoder_inputs == 2
    assert r.get_num_encoder_embeds(1) == 5
    assert r.num_tokens == 50 and not r.is_finished
    r.num_output_tokens = 3
    r.num_computed_tokens = 52
    assert r.num_tokens == 53 and r.is_finished
    r.reset()
    assert (r.num_computed_tokens, r.num_output_tokens) == (0, 0)
    assert not make_request("t", 5).has_encoder_inputs
    with pytest.raises(ValueError, match="sorted"):
        make_request("r", 50, [(30, 5), (10, 5)])
    with pytest.raises(ValueError, match="sorted"):
        make_request("r", 50, [(10, 10), (15, 5)])  # overlapping
    with pytest.raises(ValueError, match="outside"):
        make_request("r", 20, [(10, 20)])
    with pytest.raises(ValueError):
        Request("r", 0, 1)


def test_mmfeature_defaults():
    f = MMFeature("h", None)
    assert f.modality == "image"
    m = make_request("r", 10, [(0, 3)], is_embed=[torch.tensor([True, False, True])])
    assert m.get_num_encoder_embeds(0) == 2


@pytest.mark.parametrize("variant", sorted(PLACEHOLDER_VARIANTS))
def test_every_call_gives_fresh_requests_with_unread_placeholders(variant):
    """Requests are built once per spec and variant, but every call hands out new request objects
    (the engine mutates them) and placeholders whose lazy caches were never filled."""
    spec = WorkloadSpec(num_requests=3, images_per_request=(1, 3), tokens_per_image=(4, 9), seed=5,
                        duplicate_image_prob=0.3)
    a = make_requests(spec, variant)
    a[0].num_computed_tokens = 7
    for r in a:
        for f in r.mm_features:
            f.mm_position.get_num_embeds()  # fills a lazy cache where the class has one
    b = make_requests(spec, variant)
    assert all(x is not y for x, y in zip(a, b)) and b[0].num_computed_tokens == 0
    for ra, rb in zip(a, b):
        assert (ra.request_id, ra.prompt_len, ra.output_len) == (rb.request_id, rb.prompt_len, rb.output_len)
        for fa, fb in zip(ra.mm_features, rb.mm_features):
            assert fa.identifier == fb.identifier
            pa, pb = fa.mm_position, fb.mm_position
            assert (pa.offset, pa.length, pa.get_num_embeds()) == (pb.offset, pb.length, pb.get_num_embeds())
            if hasattr(pb, "__dict__"):  # dataclasses with cached_property: a copy, its cache empty
                assert pa is not pb and "embeds_cumsum" not in vars(make_requests(spec, variant)[0]
                                                                      .mm_features[0].mm_position)
