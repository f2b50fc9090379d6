"""The engine on the simulated device at the #40143 shape: host-bound steps and idle bubbles,
checked through the written traces and the lab's analyzer; plus the real tiny model on CPU.

Host time comes from a fixed cost model (``FixedHostCosts`` on a frozen clock), never from this
machine's wall clock: the scheduler before #40143 costs 3 ms a step, after it 0.3 ms, and the
device step (1 ms) sits between the two.
"""

import pytest

from labkit.engine.config import EngineConfig
from labkit.engine.device.devices import SimDevice
from labkit.engine.device.hostcost import FixedHostCosts, make_fixed_cost_device
from labkit.engine.loop import Engine, summarize_run
from labkit.engine.model import LAYER_OPS
from labkit.engine.device.profiles import CopyCost, DeviceProfile, OpCost
from labkit.errors import UsageError
from labkit.engine.device.sim_trace import device_capture
from labkit.trace.capture import trace_path

HOST = FixedHostCosts(schedule_ns={"tensor/loop": 3e6, "list/loop": 0.3e6, "fast/cursor": 0.1e6}, prepare_ns=0.1e6,
                      range_copy_ns=10_000)


def _profile(step_device_ns):
    """Uniform op durations summing to ``step_device_ns`` per step of the tiny (2-layer) model.

    The host cost per op (5 us) is mostly Python and dispatch before the runtime call, like a
    real eager op.
    """
    n_ops = 2 * len(LAYER_OPS) + 4
    op = OpCost(step_device_ns / n_ops)
    return DeviceProfile(name="test-uniform", origin="test", parametric=True, ops={}, default_op=op,
                         launch_overhead_ns=5_000, sync_overhead_ns=500, event_overhead_ns=500,
                         h2d_pageable=CopyCost(4000, 8.0), h2d_pinned=CopyCost(2000, 25.0),
                         d2h_pinned=CopyCost(2000, 25.0))


@pytest.fixture(scope="module")
def device_step_ns():
    return 1e6


def _traced(tmp_path, device_step_ns, **cfg):
    config = EngineConfig(model="tiny", workload="pr40143", **cfg)
    dev = make_fixed_cost_device(_profile(device_step_ns), record=True)
    eng = Engine(config, dev, host_costs=HOST)
    path = trace_path(tmp_path, config.variant_name().replace("/", "-"))
    with device_capture(dev, path, warmup=3, active=3) as cap:
        eng.run(6, capture=cap)
    from labkit.trace import Trace

    a = Trace(path, include_last_profiler_step=True)
    busy, idle = a.summary()["busy_us"], a.summary()["idle_us"]
    return eng, a, idle / (busy + idle)


def test_tensor_placeholders_starve_the_device_and_lists_fix_it(tmp_path, device_step_ns):
    eng_t, a_t, idle_t = _traced(tmp_path, device_step_ns, placeholder="tensor", scheduling="loop")
    eng_l, a_l, idle_l = _traced(tmp_path, device_step_ns, placeholder="list", scheduling="loop")
    eng_f, a_f, idle_f = _traced(tmp_path, device_step_ns, placeholder="fast", scheduling="cursor")
    assert idle_t > 0.2                      # host-bound: the device waits for the scheduler
    assert idle_l < idle_t / 2 and idle_f < idle_t / 2
    # the idle is host wait, and the host was in `schedule` during it
    assert a_t.summary()["idle_host_wait_us"] > 0.8 * a_t.summary()["idle_us"]
    top = a_t.call_sites().iloc[0]["call_site"]
    assert "schedule" in top
    r_t, r_l = summarize_run(eng_t, warmup_steps=2, measured_steps=3), summarize_run(eng_l, warmup_steps=2,
                                                                                      measured_steps=3)
    assert r_l["tokens_per_s_median"] > 1.2 * r_t["tokens_per_s_median"]
    assert r_t["device_idle_frac"] > r_l["device_idle_frac"]


def test_per_layer_prefix_copies_open_bubbles_between_layers(tmp_path, device_step_ns):
    runs = {s: _traced(tmp_path, device_step_ns, placeholder="fast", scheduling="cursor", prefix_ranges=s)
            for s in ("per_layer", "per_step", "cached")}
    eng, a, idle_pl = runs["per_layer"]
    n_layers = 2
    # pre-#38794: every layer uploads one row per sequence (+ nested offsets), all pageable
    per_step = a.h2d().groupby("step").size() if "step" in a.h2d().columns else None
    pageable = int((a.h2d()["kind"] == "pageable").sum())
    assert pageable >= 3 * n_layers * 128
    if per_step is not None:
        assert per_step.min() >= n_layers * 128
    assert idle_pl > 0.3
    for s in ("per_step", "cached"):
        _, a_s, idle_s = runs[s]
        assert idle_s < idle_pl / 2
        assert int((a_s.h2d()["kind"] == "pageable").sum()) <= 3
    # many bubbles sit inside forward/layer_i ranges, where the copies are made; none do without them
    def layer_idle_us(analysis):
        b = analysis.bubbles()
        return float(b.loc[b["call_site"].astype(str).str.contains("forward/layer_"), "dur_us"].sum())

    assert layer_idle_us(a) > 0.3 * a.summary()["idle_us"]
    assert int((a.bubbles()["call_site"].astype(str).str.contains("forward/layer_")).sum()) >= 3 * n_layers * 100
    for s in ("per_step", "cached"):
        assert layer_idle_us(runs[s][1]) < 0.05 * layer_idle_us(a)


def test_async_overlaps_host_and_device_sync_does_not(device_step_ns):
    rows = {}
    for is_async in (True, False):
        cfg = EngineConfig(model="tiny", workload="pr40143", placeholder="list", scheduling="loop",
                           async_scheduling=is_async)
        eng = Engine(cfg, make_fixed_cost_device(_profile(device_step_ns)), host_costs=HOST)
        eng.run(6)
        rows[is_async] = summarize_run(eng, warmup_steps=2)
    assert rows[False]["device_idle_frac"] > rows[True]["device_idle_frac"] + 0.1
    assert rows[True]["tokens_per_s_median"] > rows[False]["tokens_per_s_median"]


def test_fixed_host_costs_make_runs_repeatable(device_step_ns):
    def once():
        eng = Engine(EngineConfig(model="tiny", workload="pr40143", placeholder="tensor", scheduling="loop"),
                     make_fixed_cost_device(_profile(device_step_ns)), host_costs=HOST)
        eng.run(5)
        return [(s.start_ns, s.output_ns) for s in eng.steps]
    assert once() == once()
    with pytest.raises(KeyError):
        FixedHostCosts(schedule_ns={"list/loop": 1.0}).schedule_cost("tensor", "loop")
    with pytest.raises(UsageError):  # a fixed host cost model applies to the simulated device only
        from labkit.engine.device.devices import TorchDevice

        Engine(EngineConfig(model="tiny", workload="tiny"), TorchDevice("cpu"), host_costs=HOST)


def test_real_tiny_model_on_cpu_runs_and_samples():
    from labkit.engine.device.devices import TorchDevice

    cfg = EngineConfig(model="tiny", workload="small", placeholder="fast", scheduling="cursor",
                       prefix_ranges="per_layer", start_in_decode=False)
    eng = Engine(cfg, TorchDevice("cpu"))
    eng.run(4)
    assert len(eng.steps) == 4
    assert eng.steps[0].num_prefill > 0  # started from the prompt
    assert eng.prefix.ledger.totals()["h2d_count"] > 0


def test_bad_config_is_a_usage_error():
    with pytest.raises(UsageError):
        Engine(EngineConfig(scheduling="nope"), SimDevice())
    with pytest.raises(UsageError):
        Engine(EngineConfig(prefix_ranges="nope"), SimDevice())
    with pytest.raises(UsageError):
        Engine(EngineConfig(placeholder="nope"), SimDevice())


def test_frozen_gc_heap_freezes_what_exists_and_gives_it_back():
    """As vLLM's engine core after start-up: the heap alive on entry is frozen out of the
    collector (what is created inside is not), restored on exit; an outer freeze is left alone."""
    import gc

    from labkit.engine.loop import frozen_gc_heap

    assert gc.get_freeze_count() == 0
    before = [object() for _ in range(10)]  # noqa: F841  (alive on entry)
    with frozen_gc_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        made = [[i] for i in range(1000)]  # noqa: F841  (created inside: still collectable)
        assert gc.get_freeze_count() == frozen
        with frozen_gc_heap():  # nested: the outer freeze stays as it is
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == 0
