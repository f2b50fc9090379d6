"""``baseline`` on the installed vLLM (>= 0.21) recreates #40143's per-image cost in a decode step.

The pre-#40143 variants put back vLLM 0.20's scheduling loop (:mod:`labkit.vllm.sched020`)
next to the tensor cumsum. On a steady decode step of 128 requests x 32 images (258-token
placeholders, ends masked as Gemma's are), driven through the installed
``Scheduler._try_schedule_encoder_inputs`` on a stand-in scheduler with a real encoder cache
and real ``Request`` objects:

- ``baseline`` calls ``get_num_embeds`` once per image per request (4096 per step),
  ``merged`` not at all;
- ``baseline`` costs at least 5x ``merged`` in host time;
- both make the same decisions, in that step and on random multi-step scenarios (without
  EAGLE, chunked mm input allowed: where 0.20's and 0.33's rules agree).

Also: applying and undoing a variant clears cumsums cached under the other definition.
"""

from __future__ import annotations

import gc
import time

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm.sh)")

import torch  # noqa: E402
import vllm.v1.core.sched.scheduler as vsched  # noqa: E402
from vllm.multimodal.inputs import PlaceholderRange  # noqa: E402
from vllm.v1.core.encoder_cache_manager import EncoderCacheManager as VllmCache  # noqa: E402
from vllm_helpers import vllm_feature, vllm_request  # noqa: E402

from labkit.vllm import ab as vllm_ab  # noqa: E402
from labkit.vllm.sched020 import try_schedule_encoder_inputs_v020  # noqa: E402
from test_scheduler_vllm import VllmSide, _scenarios, _stub, play  # noqa: E402

NUM_REQUESTS, NUM_IMAGES, SOFT = 128, 32, 256  # the #40143 shape (Gemma: 256 soft tokens + 2 ends)


def _gemma_mask():
    m = torch.ones(SOFT + 2, dtype=torch.bool)
    m[0] = m[-1] = False
    return m


def _decode_batch():
    """Requests whose prompt (text + 32 images) is in the KV cache: the next step decodes."""
    mask = _gemma_mask()
    reqs = []
    for r in range(NUM_REQUESTS):
        feats, pos = [], 10
        for k in range(NUM_IMAGES):
            feats.append(vllm_feature(f"r{r}-img{k}", PlaceholderRange(pos, SOFT + 2, mask)))
            pos += SOFT + 2 + 4
        req = vllm_request(f"r{r}", pos + 10, feats)
        req.num_computed_tokens = pos + 10
        reqs.append(req)
    return reqs


def _decode_step(method, stub, reqs):
    return [method(stub, req, req.num_computed_tokens, 1, 8192, 0) for req in reqs]


def _count_calls(monkeypatch):
    calls = [0]
    inner = PlaceholderRange.get_num_embeds

    def counted(self):
        calls[0] += 1
        return inner(self)

    monkeypatch.setattr(PlaceholderRange, "get_num_embeds", counted)
    return calls


def _time_steps(method, stub, reqs, repeats=7):
    _decode_step(method, stub, reqs)  # warm-up (caches the cumsums)
    best = []
    gc.disable()
    try:
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            _decode_step(method, stub, reqs)
            best.append(time.perf_counter_ns() - t0)
    finally:
        gc.enable()
    return sorted(best)[len(best) // 2]


def test_baseline_recreates_the_per_image_calls_and_cost(monkeypatch):
    assert vllm_ab.scheduler_has_window(), "written for vLLM >= 0.21"
    merged_method = vsched.Scheduler._try_schedule_encoder_inputs
    stub = _stub(VllmCache(cache_size=8192), False)

    reqs = _decode_batch()
    calls = _count_calls(monkeypatch)
    merged_out = _decode_step(merged_method, stub, reqs)
    merged_calls = calls[0]
    monkeypatch.undo()
    merged_ns = _time_steps(merged_method, stub, reqs)

    with vllm_ab.patched_vllm("baseline"):
        method = vsched.Scheduler._try_schedule_encoder_inputs
        assert method is try_schedule_encoder_inputs_v020
        reqs_b = _decode_batch()  # fresh placeholders: tensor cumsums
        calls = _count_calls(monkeypatch)
        baseline_out = _decode_step(method, stub, reqs_b)
        baseline_calls = calls[0]
        monkeypatch.undo()
        assert isinstance(reqs_b[0].mm_features[0].mm_position.embeds_cumsum, torch.Tensor)
        baseline_ns = _time_steps(method, stub, reqs_b)

    assert merged_calls == 0
    assert baseline_calls == NUM_REQUESTS * NUM_IMAGES
    assert baseline_out == merged_out == [([], 1, 8192, [], [])] * NUM_REQUESTS
    print(f"decode step at {NUM_REQUESTS} x {NUM_IMAGES}: baseline {baseline_ns / 1e6:.2f} ms, merged {merged_ns / 1e6:.3f} ms")
    assert baseline_ns >= 5 * merged_ns, (baseline_ns, merged_ns)


class _BaselineSide(VllmSide):
    """The installed cache and requests, scheduled by the restored 0.20 loop."""

    def __init__(self, cache_size, disable_chunked):
        super().__init__(cache_size, disable_chunked, "0.33")
        self.fn = try_schedule_encoder_inputs_v020.__get__(self.stub)


def test_baseline_loop_decides_like_the_installed_method():
    total = 0
    for sc in _scenarios(41, 200, shift=0, disable_chunked=False):
        calls, kinds = play(sc, [VllmSide(sc["cache_size"], False, "0.33"), _BaselineSide(sc["cache_size"], False)])
        assert not kinds
        total += calls
    assert total > 1000


def test_variants_clear_cumsums_of_the_other_type():
    mask = torch.tensor([True, False, True])
    before = PlaceholderRange(0, 3, mask)
    assert before.get_num_embeds() == 2 and before.embeds_cumsum == [1, 1, 2]
    with vllm_ab.patched_vllm("baseline"):
        assert "embeds_cumsum" not in before.__dict__  # the list was dropped
        assert before.get_num_embeds() == 2 and isinstance(before.embeds_cumsum, torch.Tensor)
        during = PlaceholderRange(5, 3, mask)
        assert during.get_num_embeds() == 2
    # undone: the tensors are gone, vLLM's own code works on both objects again
    for p in (before, during):
        assert "embeds_cumsum" not in p.__dict__
        assert p.get_num_embeds() == 2 and p.embeds_cumsum == [1, 1, 2]
        assert p.get_embeds_indices_in_range(1, 3) == (1, 2)
    with vllm_ab.patched_vllm("pr40143"):  # keeps the list: nothing to clear
        assert before.__dict__["embeds_cumsum"] == [1, 1, 2]
