"""The early-return patch for vLLM 0.33's ``_try_schedule_encoder_inputs`` keeps every decision.

- ``patches/vllm-0.33.0-encoder-early-return.diff`` applies cleanly to the installed
  scheduler; the patched method (compiled from the patched file) and the in-process patch
  (``labkit.vllm.census.sched_census.early_return_patch``) return what the installed method returns
  and leave the encoder cache in the same state, call by call, on random scenarios (with and
  without EAGLE shift and ``disable_chunked_mm_input``; repeated items, evictions, failed
  admissions, preemption).
- vLLM's real ``Scheduler`` (generated config, CPU) with and without the patch, stepped in
  lockstep on random workloads (chunked prefill, KV preemption, prefix-cache hits, repeated
  items, encoder-cache evictions, requests arriving over time): the same scheduler output and
  encoder-cache state at every step.
- The census runs: a steady decode step at 8 x 4 is timed for all three variants.
"""

from __future__ import annotations

import ast
import random
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (run bash scripts/test_vllm.sh)")

import torch  # noqa: E402
import vllm.v1.core.sched.scheduler as vsched  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange  # noqa: E402
from vllm.v1.request import Request  # noqa: E402

from labkit.vllm.census import sched_census as sc  # noqa: E402
from test_scheduler_vllm import VllmSide, _scenarios, play  # noqa: E402

PATCH = Path(__file__).resolve().parents[2] / "patches" / "vllm-0.33.0-encoder-early-return.diff"


@pytest.fixture(scope="module")
def patched_method(tmp_path_factory):
    """``_try_schedule_encoder_inputs`` compiled from the installed file with the diff applied."""
    if shutil.which("patch") is None:
        pytest.skip("the `patch` tool is not installed")
    tmp = tmp_path_factory.mktemp("early-return")
    target = tmp / "vllm" / "v1" / "core" / "sched" / "scheduler.py"
    target.parent.mkdir(parents=True)
    shutil.copy(vsched.__file__, target)
    done = subprocess.run(["patch", "-p1", "-i", str(PATCH)], cwd=tmp, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "offset" not in done.stdout.lower() and "fuzz" not in done.stdout.lower(), done.stdout  # applies exactly
    tree = ast.parse(target.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_try_schedule_encoder_inputs")
    namespace = dict(vars(vsched))
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(target), "exec"), namespace)
    return namespace["_try_schedule_encoder_inputs"]


class _PatchedSide(VllmSide):
    def __init__(self, cache_size, disable_chunked, method):
        super().__init__(cache_size, disable_chunked, "0.33")
        self.fn = method.__get__(self.stub)


@pytest.mark.parametrize("shift,disable_chunked", [(0, False), (1, False), (0, True), (1, True)])
def test_patched_method_equals_installed_call_by_call(patched_method, shift, disable_chunked):
    from labkit.vllm.census.sched_census import _make_early_return

    in_process = _make_early_return(vsched.Scheduler.__dict__["_try_schedule_encoder_inputs"])
    total = 0
    for sc_ in _scenarios(500 + shift + 2 * disable_chunked, 120, shift=shift, disable_chunked=disable_chunked):
        calls, kinds = play(sc_, [VllmSide(sc_["cache_size"], disable_chunked, "0.33"),
                                  _PatchedSide(sc_["cache_size"], disable_chunked, patched_method),
                                  _PatchedSide(sc_["cache_size"], disable_chunked, in_process)])
        assert not kinds
        total += calls
    assert total > 800


def test_patch_returns_early_only_when_every_item_is_computed(patched_method):
    # hand-worked: items at [2, 6) and [10, 14); 14 tokens computed -> early return, 13 -> window
    from test_scheduler_vllm import _stub
    from vllm.v1.core.encoder_cache_manager import EncoderCacheManager
    from vllm_helpers import vllm_feature, vllm_request

    req = vllm_request("r", 30, [vllm_feature("a", PlaceholderRange(2, 4)), vllm_feature("b", PlaceholderRange(10, 4))])
    stub = _stub(EncoderCacheManager(cache_size=100), False)
    calls = []
    names = patched_method.__globals__  # the namespace it was compiled in
    real = names["get_mm_features_in_window"]
    try:
        names["get_mm_features_in_window"] = lambda *a, **k: calls.append(a) or real(*a, **k)
        assert patched_method(stub, req, 14, 1, 100, 0) == ([], 1, 100, [], [])
        assert calls == []  # no bisect at all
        assert patched_method(stub, req, 13, 1, 100, 0) == ([1], 1, 96, [], [])
        assert len(calls) == 1
    finally:
        names["get_mm_features_in_window"] = real


# -- the real scheduler, installed vs patched, in lockstep ----------------------------------------


def _random_requests(rng: random.Random, n: int, prefix: str) -> list:
    pool = []  # an identifier always means the same image (length and mask)
    for k in range(rng.randint(2, 6)):
        length = rng.randint(1, 40)
        mask = None if rng.random() < 0.5 else torch.tensor([rng.random() < 0.8 for _ in range(length)])
        if mask is not None and not bool(mask.any()):
            mask[0] = True
        pool.append((f"img{k}", length, mask))
    out = []
    for r in range(n):
        feats, pos = [], rng.randint(0, 20)
        for _ in range(rng.randint(0, 6)):
            ident, length, mask = rng.choice(pool)
            feats.append(MultiModalFeatureSpec(data=None, modality="image", identifier=ident,
                                               mm_position=PlaceholderRange(pos, length, mask)))
            pos += length + rng.randint(0, 12)
        out.append(Request(request_id=f"{prefix}{r}", prompt_token_ids=[0] * (pos + rng.randint(1, 10)),
                           sampling_params=SamplingParams(max_tokens=rng.randint(1, 6), ignore_eos=True),
                           pooling_params=None, mm_features=feats or None, arrival_time=float(r)))
    return out


def _state(run):
    c = run.s.encoder_cache_manager
    return (c.num_free_slots, c.num_freeable_slots, {k: set(v) for k, v in c.cached.items()}, list(c.freeable.items()))


def _view(out):
    return (dict(out.num_scheduled_tokens), {k: list(v) for k, v in out.scheduled_encoder_inputs.items()},
            sorted(out.free_encoder_mm_hashes), sorted(out.preempted_req_ids or ()), sorted(out.finished_req_ids))


def test_real_scheduler_patched_equals_installed_on_random_workloads(tmp_path):
    model_dir = sc.write_model_config(tmp_path / "model")
    rng = random.Random(21)
    seen = {"preempted": 0, "evicted": 0, "encoded": 0}
    for case in range(16):
        seed = rng.randrange(1 << 30)
        budget = rng.choice((40, 64, 128))  # also the encoder budget and cache (items: 1-40 embeddings)
        blocks = rng.choice((16, 24, 400))
        caching = rng.random() < 0.5
        runs = []
        for patched in (False, True):
            s = sc.make_scheduler(model_dir, max_num_batched_tokens=budget, max_num_seqs=8, num_blocks=blocks,
                                  block_size=16, max_model_len=2048, enable_prefix_caching=caching,
                                  max_item_tokens=40)
            runs.append(sc.SchedulerRun(s, []))
        wl = random.Random(seed)
        pending = _random_requests(wl, 10, "q")
        wl = random.Random(seed)
        pending_b = _random_requests(wl, 10, "q")
        for step in range(300):
            if pending and rng.random() < 0.5:  # a request arrives (same one on both sides)
                for run, req in zip(runs, (pending.pop(0), pending_b.pop(0))):
                    run.s.add_request(req)
                    run.requests[req.request_id] = req
            outs = []
            for run, patched in zip(runs, (False, True)):
                if patched:
                    with sc.early_return_patch():
                        outs.append(run.step()[2])
                else:
                    outs.append(run.step()[2])
            assert _view(outs[0]) == _view(outs[1]), (case, step)
            assert _state(runs[0]) == _state(runs[1]), (case, step)
            seen["preempted"] += bool(outs[0].preempted_req_ids)
            seen["evicted"] += len(outs[0].free_encoder_mm_hashes)
            seen["encoded"] += sum(len(v) for v in outs[0].scheduled_encoder_inputs.values())
            if not pending and not runs[0].s.has_unfinished_requests():
                break
    assert seen["encoded"] > 50 and seen["evicted"] > 5 and seen["preempted"] > 0, seen


def test_census_point_runs_with_every_variant(tmp_path):
    rows = sc.measure_point(sc.write_model_config(tmp_path / "model"), 8, 4, steps=2, warmup=1)
    assert [(r["variant"], r["phase"]) for r in rows] == [
        (v, p) for v in sc.VARIANTS for p in ("schedule", "update")]
    assert all(r["median_ns"] > 0 for r in rows)


def test_ab_switch_offers_the_patch_as_a_variant():
    from labkit.vllm import ab

    installed = vsched.Scheduler.__dict__["_try_schedule_encoder_inputs"]
    with ab.patched_vllm("early-return"):
        assert getattr(vsched.Scheduler.__dict__["_try_schedule_encoder_inputs"], "labkit_early_return", False)
    assert vsched.Scheduler.__dict__["_try_schedule_encoder_inputs"] is installed
