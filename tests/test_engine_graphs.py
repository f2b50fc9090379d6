"""CUDA graphs in the engine: capture sizes and pieces, simulated replays, and the #40143-shape bubbles.

Simulated runs here take their host time from a fixed cost model (``FixedHostCosts`` on a frozen
clock), never from this machine's wall clock, so every number below is deterministic.
"""

import numpy as np
import pytest

from labkit.device import has_cuda
from labkit.engine.config import EngineConfig
from labkit.engine.device.devices import SimDevice
from labkit.engine.graphs import (ATTN_OPS, capture_sizes, effective_mode, padded_size, piece_ops, plan_step,
                                  replays_per_step)
from labkit.engine.device.hostcost import FixedHostCosts, make_fixed_cost_device
from labkit.engine.loop import Engine, summarize_run
from labkit.engine.model import HEAD_OPS, LAYER_OPS, TAIL_OPS
from labkit.engine.device.profiles import CopyCost, DeviceProfile, OpCost
from labkit.errors import UsageError

OP_NS = 10_000  # every op: 10 us of device time (+ PER_TOKEN_NS per query token)
PER_TOKEN_NS = 10


def graph_profile(per_token_ns: float = 0.0) -> DeviceProfile:
    """Fixed test profile: ops of 10 us, eager host cost 40 us per op, 10 us per graph replay."""
    return DeviceProfile(name="graph-test", origin="test", parametric=True, ops={},
                         default_op=OpCost(OP_NS, per_token_ns), launch_overhead_ns=40_000,
                         sync_overhead_ns=2_000, event_overhead_ns=2_000, graph_replay_ns=10_000,
                         h2d_pageable=CopyCost(10_000, 10.0), h2d_pinned=CopyCost(3_000, 1e12),
                         d2h_pinned=CopyCost(3_000, 1e12))


#: host faster than the 42-layer device step (42 x 11 x 10 us = 4.6 ms) except the pre-#40143 scheduler
HOST = FixedHostCosts(schedule_ns={"tensor/loop": 8e6, "list/loop": 1e6, "fast/cursor": 0.3e6}, prepare_ns=0.5e6,
                      range_copy_ns=10_000)


def run(placeholder="fast", scheduling="cursor", prefix_ranges="none", cudagraph="full", *, model="gemma4-e4b-like",
        workload="pr40143-short", steps=4, warmup=2, profile=None, record=False, num_requests=None):
    cfg = EngineConfig(model=model, workload=workload, placeholder=placeholder, scheduling=scheduling,
                       prefix_ranges=prefix_ranges, cudagraph=cudagraph, num_requests=num_requests)
    dev = make_fixed_cost_device(profile or graph_profile(), record=record)
    eng = Engine(cfg, dev, host_costs=HOST)
    eng.run(warmup + steps + 1)
    return eng, summarize_run(eng, warmup_steps=warmup, measured_steps=steps)


# -- layout ------------------------------------------------------------------------------------------

def test_capture_sizes_and_padding_follow_vllm():
    sizes = capture_sizes()
    assert sizes[:5] == [1, 2, 4, 8, 16] and 248 in sizes and 252 not in sizes
    assert sizes[-3:] == [480, 496, 512] and 264 not in sizes and 272 in sizes
    assert [padded_size(n, sizes) for n in (1, 3, 5, 9, 128, 129, 257, 512)] == [1, 4, 8, 16, 128, 136, 272, 512]
    assert padded_size(513, sizes) is None
    assert capture_sizes(100)[-1] == 96


def test_pieces_and_eager_attention_rebuild_the_eager_forward():
    n = 3
    order = []
    for k in range(n + 1):
        order += piece_ops(n, k)
        if k < n:
            order += ATTN_OPS
    assert tuple(order) == HEAD_OPS + LAYER_OPS * n
    assert "attention" not in piece_ops(n, 1) and "kv_write" not in piece_ops(n, 1)
    assert replays_per_step("piecewise", n) == n + 2 and replays_per_step("full", n) == 1


def test_full_falls_back_to_piecewise_only_for_per_layer():
    mode, note = effective_mode("full", "per_layer")
    assert mode == "piecewise" and "per_layer" in note
    assert effective_mode("full", "per_step") == ("full", None)
    assert effective_mode("piecewise", "per_layer") == ("piecewise", None)
    with pytest.raises(UsageError):
        EngineConfig(cudagraph="fullest")


def test_step_plans():
    sizes = capture_sizes()
    assert plan_step("full", 5, 5, sizes) == plan_step("full", 8, 8, sizes)  # padded to 8, one full graph
    assert plan_step("full", 5, 5, sizes).mode == "full"
    mixed = plan_step("full", 40, 5, sizes)  # a prefill row: piecewise, tokens and seqs padded apart
    assert (mixed.mode, mixed.tokens, mixed.seqs) == ("piecewise", 40, 8)
    assert plan_step("piecewise", 5, 5, sizes).mode == "piecewise"
    assert plan_step("full", 600, 5, sizes).mode == "eager"  # beyond the largest capture size
    assert plan_step("none", 5, 5, sizes).mode == "eager"
    assert plan_step("full", 40, 40, sizes, seq_sizes=[1, 2, 4, 8]).mode == "eager"


# -- the simulated device ------------------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.t = 0

    def __call__(self):
        return self.t


def test_replay_is_one_host_call_and_back_to_back_ops():
    clk = FakeClock()
    prof = DeviceProfile(name="hand", origin="test", parametric=True, ops={"A": OpCost(5000), "B": OpCost(2000)},
                         launch_overhead_ns=1000, graph_replay_ns=700)
    d = SimDevice(prof, clock=clk)
    with pytest.raises(RuntimeError):
        d.replay("g", [("A", 0, 0)])
    d.capture("g", [("A", 0, 0), ("B", 0, 0)])  # host: 2 x 1000 + 700
    assert d.now_ns() == 2700 and d.intervals == []
    d.launch("A")                                 # host [2700,3700], kernel [3700,8700]
    assert d.replay("g", [("A", 0, 0), ("B", 0, 0)]) == 7000  # host [3700,4400]; ops [8700,13700],[13700,15700]
    assert d.now_ns() == 4400
    assert d.intervals == [(3700, 8700), (8700, 13700), (13700, 15700)]
    assert d.num_replays == 1 and d.num_launches == 2
    clk.t += 20_000                               # host at 24400: stream idle since 15700
    d.replay("g", [("A", 0, 0), ("B", 0, 0)])     # host [24400,25100]; ops [25100,32100]
    assert d.intervals[-2:] == [(25100, 30100), (30100, 32100)]
    assert d.idle_between(3700, 32100) == 25100 - 15700


@pytest.mark.parametrize("mode,per_step", [("none", 0), ("piecewise", 2 + 2), ("full", 1)])
def test_replays_per_step_on_the_tiny_model(mode, per_step):
    eng, row = run("fast", "cursor", "none", mode, model="tiny", workload="small", steps=3, warmup=1)
    assert all(s.replays == per_step for s in eng.steps)
    assert row["replays_per_step"] == per_step and row["cudagraph"] == mode and row["cudagraph_run"] == mode
    assert row["graph_steps"] == ("eager:3" if mode == "none" else f"{mode}:3")


def test_a_full_replay_runs_the_captured_ops_of_the_padded_batch_back_to_back():
    # 5 decoding sequences pad to 8: every op of the full graph costs 10 us + 10 ns x 8 tokens
    eng, row = run("fast", "cursor", "none", "full", model="tiny", workload="small", num_requests=5, steps=2,
                   warmup=1, profile=graph_profile(PER_TOKEN_NS), record=True)
    dev = eng.dev
    launches = {s.correlation for s in dev.host_spans if s.name == "cudaGraphLaunch"}
    by_corr = {}
    for o in dev.device_ops:
        if o.correlation in launches:
            by_corr.setdefault(o.correlation, []).append(o)
    assert len(by_corr) == len(eng.steps)
    n_ops = len(HEAD_OPS) + 2 * len(LAYER_OPS) + len(TAIL_OPS)
    for ops in by_corr.values():
        assert [o.name for o in ops] == list(HEAD_OPS + LAYER_OPS * 2 + TAIL_OPS)
        assert all(o.end_ns - o.start_ns == OP_NS + PER_TOKEN_NS * 8 for o in ops)
        assert all(a.end_ns == b.start_ns for a, b in zip(ops, ops[1:]))  # no gaps inside a replay
    assert sum(o.end_ns - o.start_ns for ops in by_corr.values() for o in ops) == len(by_corr) * n_ops * 10_080
    # device busy per step = the graph's ops + 6 pinned input copies + 1 sampled-ids copy (3 us each)
    assert row["device_busy_per_step_ns"] == n_ops * 10_080 + 7 * 3_000


# -- the #40143 shape under a fixed host cost model -------------------------------------------------

@pytest.fixture(scope="module")
def full_rows():
    variants = [("tensor", "loop", "none"), ("list", "loop", "none"), ("fast", "cursor", "none"),
                ("fast", "cursor", "per_step"), ("fast", "cursor", "pinned"), ("fast", "cursor", "cached")]
    return {f"{p}/{s}/{r}": run(p, s, r, "full")[1] for p, s, r in variants}


def test_graphs_make_the_after_fix_variants_device_bound(full_rows):
    # device step: 42 layers x 11 ops x 10 us + embed and head; the fixed host is shorter except tensor/loop
    device_ns = (42 * 11 + 4) * OP_NS
    for v in ("list/loop/none", "fast/cursor/none", "fast/cursor/per_step", "fast/cursor/pinned", "fast/cursor/cached"):
        r = full_rows[v]
        assert r["cudagraph_run"] == "full" and r["replays_per_step"] == 1
        assert r["device_idle_frac"] <= 0.10, (v, r["device_idle_frac"])
        assert r["median_ns"] == pytest.approx(r["device_busy_per_step_ns"], rel=0.1)
        assert r["device_busy_per_step_ns"] >= device_ns
    # before #40143 the scheduler (8 ms) outlasts the device step: the bubble is what remains
    t = full_rows["tensor/loop/none"]
    assert t["device_idle_frac"] > full_rows["fast/cursor/none"]["device_idle_frac"] + 0.3
    assert t["median_ns"] >= 8e6
    assert t["device_idle_frac"] == pytest.approx(1 - t["device_busy_per_step_ns"] / t["median_ns"], abs=0.02)


def test_without_graphs_the_same_host_starves_the_device(full_rows):
    _, eager = run("fast", "cursor", "none", "none")
    # 466 eager launches x 40 us of host per step against 4.7 ms of device work
    assert eager["device_idle_frac"] > 0.6
    assert eager["tokens_per_s_median"] * 2 < full_rows["fast/cursor/none"]["tokens_per_s_median"]


def test_per_layer_keeps_its_bubbles_and_says_it_ran_piecewise():
    eng, r = run("fast", "cursor", "per_layer", "full", steps=2, warmup=1)
    assert r["cudagraph"] == "full" and r["cudagraph_run"] == "piecewise" and "per_layer" in r["cudagraph_note"]
    assert r["replays_per_step"] == 42 + 2
    assert r["device_idle_frac"] >= 0.30
    assert r["h2d_per_step"] >= 42 * 128


def test_analyzer_puts_host_wait_on_the_scheduler_and_the_prefix_range_copies(tmp_path):
    from labkit.trace import Trace
    from labkit.engine.device.sim_trace import device_capture
    from labkit.trace.capture import trace_path

    def traced(placeholder, scheduling, prefix_ranges):
        cfg = EngineConfig(model="gemma4-e4b-like", workload="pr40143-short", placeholder=placeholder,
                           scheduling=scheduling, prefix_ranges=prefix_ranges, cudagraph="full")
        dev = make_fixed_cost_device(graph_profile(), record=True)
        eng = Engine(cfg, dev, host_costs=HOST)
        path = trace_path(tmp_path, cfg.variant_name().replace("/", "-"))
        with device_capture(dev, path, warmup=2, active=2, metadata={"cudagraph": cfg.cudagraph}) as cap:
            eng.run(4, capture=cap)
        return Trace(path, include_last_profiler_step=True)

    a = traced("tensor", "loop", "none")
    s = a.summary()
    assert s["idle_host_wait_us"] > 0.8 * s["idle_us"] > 0
    assert "schedule" in str(a.call_sites().iloc[0]["call_site"])
    b = traced("fast", "cursor", "per_layer")
    bub = b.bubbles()
    in_layers = bub["call_site"].astype(str).str.contains("forward/layer_")
    assert float(bub.loc[in_layers, "dur_us"].sum()) > 0.5 * b.summary()["idle_us"]
    top = b.call_sites().iloc[0]["call_site"]
    assert "forward/layer_" in str(top) or "h2d" in str(top)
    assert int((b.h2d()["kind"] == "pageable").sum()) >= 2 * 42 * 128


# -- the real-device runner's buffers and padding, on a CPU -----------------------------------------

class RerunGraphs:
    """CPU stand-in for CUDA graphs: capture runs the function once, replay runs it again and
    writes into the captured outputs (what a graph replay does to its output memory)."""

    def pool(self):
        return None

    def synchronize(self):
        pass

    def capture(self, fn, pool):
        out = fn()
        return _Rerun(fn, out), out


class _Rerun:
    def __init__(self, fn, out):
        self.fn, self.out = fn, out

    def replay(self):
        new = self.fn()
        pairs = zip(self.out, new) if isinstance(self.out, tuple) else [(self.out, new)]
        for a, b in pairs:
            if a is not None:
                a.copy_(b)


def _attention_from_device_lengths(q, k, v, cu_q, cu_k, ranges, window, seq_lens):
    # reads the lengths from cu_seqlens, as the Triton kernel does (host seq_lens are not trusted)
    from labkit.attn.prefix_mask import prefix_attention_ref

    total_k = int(cu_k[-1])
    return prefix_attention_ref(q, k[:total_k], v[:total_k], cu_q, cu_k, ranges, sliding_window=window,
                                compute_dtype=q.dtype)


def _sampled_eager_and_graphs(dev, model, graphs=None, steps=5, **cfg):
    """Sampled ids per step of the same workload run under full graphs and eagerly, on one model
    whose KV buffers start both runs with the same contents."""
    from labkit.engine.cudagraph_torch import CudaGraphRunner

    full = EngineConfig(model=model.cfg.name, cudagraph="full", **cfg)
    eng = Engine(full, dev, model=model, graph_runner=None if graphs is None else CudaGraphRunner(
        model, "full", with_ranges=cfg.get("prefix_ranges", "none") != "none", max_ranges=8, kv_reserve=4096,
        graphs=graphs))
    eng.capture_graphs()  # sizes the KV buffers for the whole run first
    k0, v0 = model.k_buf.clone(), model.v_buf.clone()
    eng.run(steps)
    model.k_buf.copy_(k0)
    model.v_buf.copy_(v0)
    eager = Engine(EngineConfig(model=model.cfg.name, cudagraph="none", **cfg), dev, model=model)
    eager.run(steps)
    return eng, eager


def test_full_graph_engine_samples_what_the_eager_engine_samples_on_cpu():
    import torch

    from labkit.engine.config import get_model_config
    from labkit.engine.device.devices import TorchDevice
    from labkit.engine.model import TransformerStack

    model = TransformerStack(get_model_config("tiny"), "cpu", dtype=torch.float32, seed=1,
                             attention=_attention_from_device_lengths)
    eng, eager = _sampled_eager_and_graphs(TorchDevice("cpu"), model, RerunGraphs(), workload="small",
                                           placeholder="fast", scheduling="cursor", prefix_ranges="per_step")
    assert {s.graph_mode for s in eng.steps} == {"full"} and {s.graph_mode for s in eager.steps} == {"eager"}
    assert len(eng.sampled) == len(eager.sampled) == 5
    assert any(len(set(ids.tolist())) > 1 for ids in eager.sampled)  # rows tell apart: the comparison means something
    for a, b in zip(eng.sampled, eager.sampled):
        assert torch.equal(a, b)


@pytest.mark.parametrize("mode,q_lens,kv_lens,ranges", [
    ("full", [1, 1, 1, 1, 1], [20, 33, 9, 41, 12], [[[2, 6], [8, 11]]] * 5),   # 5 decode rows pad to 8
    ("piecewise", [1, 6, 1], [20, 30, 9], [[[3, 8]], [[22, 27]], [[0, 0]]]),  # a prefill chunk over an image
])
def test_graph_runner_matches_the_eager_forward_on_cpu(mode, q_lens, kv_lens, ranges):
    import torch

    from labkit.engine.config import get_model_config
    from labkit.engine.cudagraph_torch import CudaGraphRunner
    from labkit.engine.device.devices import TorchDevice
    from labkit.engine.model import make_batch
    from labkit.engine.model import TransformerStack

    cfg = get_model_config("tiny")
    model = TransformerStack(cfg, "cpu", dtype=torch.float32, seed=1, attention=_attention_from_device_lengths)
    dev = TorchDevice("cpu")
    rng = torch.tensor(ranges, dtype=torch.int32)
    runner = CudaGraphRunner(model, mode, with_ranges=True, max_ranges=3, kv_reserve=512, graphs=RerunGraphs())
    runner.capture(dev, max_tokens=16, max_seqs=8)
    for shift in (0, 4):  # two steps with other lengths replay the same graphs
        q, kv = np.array(q_lens), np.array(kv_lens) + shift
        batch = make_batch(dev, model, q, kv)
        h_eager = model.forward(dev, batch, lambda i: rng)
        ids_eager = model.sample(dev, batch, h_eager)
        before = runner.replays
        h_graph = runner.forward(dev, batch, lambda i: rng)
        ids_graph = runner.sample(dev, batch, h_graph)
        assert runner.last.mode == mode
        assert runner.replays - before == (1 if mode == "full" else cfg.num_layers + 2)
        assert torch.equal(ids_graph, ids_eager)
        if mode == "piecewise":
            assert runner.last.tokens == 8 and runner.last.seqs == 4
            torch.testing.assert_close(h_graph[:batch.num_tokens], h_eager, rtol=1e-5, atol=1e-5)
        else:
            assert runner.last.tokens == 8
            n = batch.num_seqs
            torch.testing.assert_close(runner.h_head[:n], h_eager, rtol=1e-5, atol=1e-5)
            assert torch.equal(runner.ranges[:n, :2], rng) and not runner.ranges[n:8].any()


def test_full_graph_steps_build_their_padded_inputs_once_on_cpu():
    """The engine's full-graph step fills the graph's buffers once (6 inputs), with no second set of
    copies, and replaying on those inputs samples what the eager forward samples on them."""
    import torch

    from labkit.engine.config import get_model_config
    from labkit.engine.cudagraph_torch import CudaGraphRunner
    from labkit.engine.device.devices import TorchDevice
    from labkit.engine.model import TransformerStack

    model = TransformerStack(get_model_config("tiny"), "cpu", dtype=torch.float32, seed=2,
                             attention=_attention_from_device_lengths)
    dev = TorchDevice("cpu")
    copies = {"h2d": 0, "fill": 0}
    real_copy = dev.copy_h2d

    def counted_copy(*a, **k):
        copies["h2d"] += 1
        return real_copy(*a, **k)

    dev.copy_h2d = counted_copy
    runner = CudaGraphRunner(model, "full", kv_reserve=4096, graphs=RerunGraphs())
    real_fill = runner._fill

    def counted_fill(buf, src):
        copies["fill"] += 1
        return real_fill(buf, src)

    runner._fill = counted_fill
    cfg = EngineConfig(model="tiny", workload="small", placeholder="fast", scheduling="cursor", cudagraph="full")
    eng = Engine(cfg, dev, model=model, graph_runner=runner)
    eng.run(4)
    assert {s.graph_mode for s in eng.steps} == {"full"} and all(s.replays == 1 for s in eng.steps)
    assert len(eng.steps) == 4  # every launched step drained
    assert copies == {"h2d": 0, "fill": 6 * 4}
    # the batch prepare built is the one the graph reads: same ids as the eager forward on it
    batch = runner.prepare(dev, np.ones(5, dtype=np.int64), np.array([20, 33, 9, 41, 12]))
    assert batch.num_seqs == 5 and batch.tensors["cu_seqlens_k"].tolist() == [0, 20, 53, 62, 103, 115]
    gen = torch.Generator().manual_seed(5)
    batch.tensors["input_ids"].copy_(torch.randint(0, get_model_config("tiny").vocab_size, (5,), generator=gen))
    ids_eager = model.sample(dev, batch, model.forward(dev, batch, lambda i: None))
    ids_graph = runner.sample(dev, batch, runner.forward(dev, batch, lambda i: None))
    assert len(set(ids_eager.tolist())) > 1 and torch.equal(ids_graph, ids_eager)
    assert runner.last.tokens == 8 and not runner.ids[5:8].any()  # padded rows: token 0


# -- the real GPU path -------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["piecewise", "full"])
def test_cuda_graphs_replay_the_eager_forward(mode):
    import torch

    from labkit.engine.config import get_model_config
    from labkit.engine.cudagraph_torch import CudaGraphRunner
    from labkit.engine.device.devices import TorchDevice
    from labkit.engine.model import make_batch
    from labkit.engine.model import TransformerStack

    torch.backends.cuda.matmul.allow_tf32 = False
    model = TransformerStack(get_model_config("small"), "cuda", dtype=torch.float32, seed=3)
    dev = TorchDevice("cuda")
    n = 5  # pads to 8
    q_lens = np.ones(n, dtype=np.int64)
    kv_lens = np.array([40, 90, 65, 130, 7], dtype=np.int64)
    runner = CudaGraphRunner(model, mode, kv_reserve=4096)
    assert runner.capture(dev, max_tokens=n, max_seqs=n) > 0
    batch = make_batch(dev, model, q_lens, kv_lens)
    gen = torch.Generator().manual_seed(7)  # distinct tokens per row, so the comparison tells rows apart
    vocab = get_model_config("small").vocab_size
    batch.tensors["input_ids"].copy_(torch.randint(0, vocab, (n,), generator=gen))
    ids_eager = model.sample(dev, batch, model.forward(dev, batch, lambda i: None))
    assert len(set(ids_eager.cpu().tolist())) > 1
    h = runner.forward(dev, batch, lambda i: None)
    ids_graph = runner.sample(dev, batch, h)
    torch.cuda.synchronize()
    assert runner.last.mode == mode and runner.last.tokens == 8
    assert runner.replays == (1 if mode == "full" else get_model_config("small").num_layers + 2)
    assert torch.equal(ids_graph.cpu(), ids_eager.cpu())
    # a second step with other lengths replays the same graphs and still agrees
    batch2 = make_batch(dev, model, q_lens, kv_lens + 3)
    batch2.tensors["input_ids"].copy_(torch.randint(0, vocab, (n,), generator=gen))
    ids2_eager = model.sample(dev, batch2, model.forward(dev, batch2, lambda i: None))
    ids2_graph = runner.sample(dev, batch2, runner.forward(dev, batch2, lambda i: None))
    assert torch.equal(ids2_graph.cpu(), ids2_eager.cpu())


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")
def test_engine_on_cuda_with_full_graphs_and_ranges():
    """Graph replay samples, step by step, what the eager forward samples on the same inputs."""
    import torch

    from labkit.engine.config import get_model_config
    from labkit.engine.device.devices import TorchDevice
    from labkit.engine.model import TransformerStack

    torch.backends.cuda.matmul.allow_tf32 = False
    model = TransformerStack(get_model_config("small"), "cuda", dtype=torch.float32, seed=5)
    eng, eager = _sampled_eager_and_graphs(TorchDevice("cuda"), model, workload="small", placeholder="fast",
                                           scheduling="cursor", prefix_ranges="per_step")
    assert eng.graphs_captured > 0
    assert {s.graph_mode for s in eng.steps} == {"full"} and all(s.replays == 1 for s in eng.steps)
    assert len(eng.sampled) == len(eager.sampled) == 5
    assert any(len(set(ids.tolist())) > 1 for ids in eager.sampled)
    for a, b in zip(eng.sampled, eager.sampled):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")
def test_recorded_profile_has_a_replay_cost():
    import torch

    from labkit.engine.config import get_model_config
    from labkit.engine.model import TransformerStack
    from labkit.engine.record_profile import replay_host_ns

    from labkit.timing import time_host

    model = TransformerStack(get_model_config("small"), "cuda")
    ns = replay_host_ns(model, num_seqs=8)
    # the same piece launched op by op from Python: one replay of it must cost the host less
    x = torch.zeros(8, model.cfg.hidden_size, device="cuda", dtype=model.dtype)
    w = model.weights[0]
    eager_ns = time_host(lambda: model._rms_norm(x, w["in_norm"]) @ w["qkv"], warmup=5, repeats=40).median_ns
    torch.cuda.synchronize()
    assert 1_000 < ns < eager_ns, (ns, eager_ns)  # a host call of some us, never the device time
