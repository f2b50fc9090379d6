"""The simulated device against hand-worked schedules (injected host clock, times in ns)."""

import dataclasses

import pytest

from labkit.engine.device.devices import SimDevice
from labkit.engine.device.profiles import (CopyCost, DeviceProfile, OpCost, fit_op_costs, load_profile,
                                    parametric_profile, profile_from_json, save_profile)
from labkit.errors import UsageError


class FakeClock:
    def __init__(self):
        self.t = 1_000  # any origin: the device counts from its creation

    def __call__(self):
        return self.t


def hand_profile():
    return DeviceProfile(name="hand", origin="test", parametric=True, ops={"A": OpCost(5000)},
                         launch_overhead_ns=1000, sync_overhead_ns=0, event_overhead_ns=0,
                         h2d_pageable=CopyCost(500, 1.0), h2d_pinned=CopyCost(200, 2.0), d2h_pinned=CopyCost(200, 2.0))


def test_three_launches_and_a_pageable_copy():
    clk = FakeClock()
    d = SimDevice(hand_profile(), clock=clk)
    d.launch("A")                      # host [0,1000], kernel [1000,6000]
    clk.t += 500                       # host work: host at 1500
    d.launch("B", 2000)                # host [1500,2500], kernel [6000,8000]
    d.launch("C", 1000)                # host [2500,3500], kernel [8000,9000]
    d.copy_h2d("x", nbytes=100)        # waits for the drain: copy [9000,9600], host back at 9600
    assert d.now_ns() == 9600
    clk.t += 2000                      # host at 11600
    d.launch("D", 1000)                # host [11600,12600], kernel [12600,13600]
    assert d.intervals == [(1000, 6000), (6000, 8000), (8000, 9000), (9000, 9600), (12600, 13600)]
    assert d.busy_ns == 9600
    assert d.idle_between(1000, 13600) == 3000
    assert d.host_wait_ns == 9600 - 4500
    assert d.now_ns() == 12600


def test_pinned_nonblocking_copy_does_not_block_but_blocking_one_does():
    clk = FakeClock()
    d = SimDevice(hand_profile(), clock=clk)
    d.launch("A")                                             # kernel [1000,6000]
    d.copy_h2d("x", nbytes=200, pinned=True, non_blocking=True)  # copy [6000,6300], host 2000
    assert d.now_ns() == 2000
    d.copy_h2d("y", nbytes=200, pinned=True, non_blocking=False)  # copy [6300,6600], host waits
    assert d.now_ns() == 6600
    assert d.intervals[-1] == (6300, 6600)


def test_events_and_synchronize():
    clk = FakeClock()
    d = SimDevice(hand_profile(), clock=clk)
    d.launch("A")              # kernel [1000,6000], host 1000
    ev = d.record_event()      # completes at 6000
    assert ev.time_ns == 6000 and d.now_ns() == 1000
    d.launch("B", 3000)        # kernel [6000,9000], host 2000
    d.wait_event(ev)
    assert d.now_ns() == 6000
    d.synchronize()
    assert d.now_ns() == 9000
    clk.t += 4000
    assert d.record_event().time_ns == 13000  # idle stream: the event completes at once


def test_recording_does_not_change_the_timeline():
    def run(record):
        clk = FakeClock()
        d = SimDevice(hand_profile(), clock=clk, record=record)
        with d.annotate("schedule"):
            clk.t += 700
        d.launch("A")
        d.copy_h2d("x", nbytes=10)
        clk.t += 300
        d.launch("B", 100)
        return d.intervals, d.now_ns(), d
    a, ta, _ = run(False)
    b, tb, dev = run(True)
    assert a == b and ta == tb
    names = [(s.name, s.cat) for s in dev.host_spans]
    assert ("schedule", "user_annotation") in names and ("cudaMemcpyAsync", "cuda_runtime") in names
    assert [o.name for o in dev.device_ops] == ["A", "Memcpy HtoD (Pageable -> Device)", "B"]


class _Rec:
    def __init__(self, nbytes, pinned, synchronizing, what="row"):
        self.nbytes, self.pinned, self.synchronizing, self.what = nbytes, pinned, synchronizing, what


class _Step:
    def __init__(self):
        self.copies = []


class FakeLedger:
    def __init__(self):
        self.steps = [_Step()]

    def all_steps(self):
        return self.steps


def test_produce_replays_copies_interleaved_with_the_host_time():
    clk = FakeClock()
    d = SimDevice(hand_profile(), clock=clk)
    d.launch("A")  # kernel [1000,6000], host 1000
    ledger = FakeLedger()

    def host_code(n):
        for _ in range(n):
            clk.t += 2000  # 2 us of host work per copy
            ledger.steps[-1].copies.append(_Rec(100, False, True))
        return "done"

    assert d.produce(host_code, 2, ledger) == "done"
    # copy 1: host 1000 + 2000 = 3000, call returns 4000, waits for A: copy [6000,6600];
    # copy 2: host 6600 + 2000 = 8600, call returns 9600, copy [9600,10200]
    assert d.intervals[1:] == [(6000, 6600), (9600, 10200)]
    assert d.now_ns() == 10200


def test_profile_cost_model_and_fit():
    c = OpCost(1000, 2.0, 0.5)
    assert c.duration_ns(tokens=10, kv_tokens=100) == 1000 + 20 + 50
    samples = [("mm", t, kv, 3000 + 7 * t + 0.25 * kv) for t, kv in [(1, 100), (8, 100), (1, 900), (64, 5000)]]
    samples += [("norm", t, 0, 500 + 3 * t) for t in (1, 10, 100)]
    fit = fit_op_costs(samples)
    assert fit["mm"].base_ns == pytest.approx(3000, rel=1e-6)
    assert fit["mm"].per_token_ns == pytest.approx(7, rel=1e-6)
    assert fit["mm"].per_kv_token_ns == pytest.approx(0.25, rel=1e-6)
    # norm: 500 + 3 * tokens by construction, no kv term
    assert fit["norm"].base_ns == pytest.approx(500, rel=1e-6) and fit["norm"].per_kv_token_ns == 0.0
    assert fit["norm"].per_token_ns == pytest.approx(3, rel=1e-6)


def test_copy_cost_through_two_sizes_by_hand():
    from labkit.engine.device.profiles import copy_cost_from_two_sizes

    big = 16 * 2**20
    # a copy engine of 13 B/ns behind a 15 us fixed cost: the fit gives both back
    c = copy_cost_from_two_sizes(64, 15_000 + 64 / 13, big, 15_000 + big / 13, origin="hand")
    assert c.bytes_per_ns == pytest.approx(13) and c.latency_ns == pytest.approx(15_000) and c.origin == "hand"
    assert c.duration_ns(4096) == round(15_000 + 4096 / 13)
    assert copy_cost_from_two_sizes(64, 100.0, 4096, 50.0).latency_ns >= 0.0  # noisy timings never go negative
    with pytest.raises(ValueError):
        copy_cost_from_two_sizes(4096, 1.0, 64, 2.0)


def test_refit_copy_costs_from_a_machines_calibration():
    from labkit.engine.record_profile import refit_copy_costs
    from labkit.results import make_result

    def row(variant, size, ns):
        return {"kind": "gpu", "variant": variant, "metric": "host_ns", "size_bytes": size, "median_ns": ns}

    sync = 6_000.0
    # host time = the synchronize + 9 us + bytes / 14 (pageable) and + 5 us + bytes / 56 (pinned)
    rows = [row("h2d_pageable", n, sync + 9_000 + n / 14) for n in (256, 4096, 1 << 20)]
    rows += [row("h2d_pinned", n, sync + 5_000 + n / 56) for n in (256, 1 << 20)]
    rows += [{**row("h2d_pinned", 256, 1.0), "metric": "device_ns"}, {"kind": "cpu", "variant": "list_index",
                                                                      "metric": "host_ns", "median_ns": 11.0}]
    cal = make_result("calibration_quick", rows, source="measured-gpu", machine={"slug": "gpu-x"})
    prof = dataclasses.replace(hand_profile(), sync_overhead_ns=sync)
    new = refit_copy_costs(prof, cal)
    assert new.h2d_pageable.latency_ns == pytest.approx(9_000) and new.h2d_pageable.bytes_per_ns == pytest.approx(14)
    assert new.h2d_pinned.latency_ns == pytest.approx(5_000) and new.h2d_pinned.bytes_per_ns == pytest.approx(56)
    assert "gpu-x calibration_quick" in new.h2d_pinned.origin
    assert (new.d2h_pinned.latency_ns, new.d2h_pinned.bytes_per_ns) == (prof.d2h_pinned.latency_ns,
                                                                       prof.d2h_pinned.bytes_per_ns)
    assert new.d2h_pinned.origin.startswith("UNKNOWN")
    assert new.ops == prof.ops and new.launch_overhead_ns == prof.launch_overhead_ns
    one_size = make_result("calibration", [row("h2d_pageable", 256, 1.0), row("h2d_pinned", 256, 1.0)],
                           source="measured-gpu", machine={"slug": "gpu-x"})
    with pytest.raises(UsageError, match="two are needed"):
        refit_copy_costs(prof, one_size)


def test_parametric_profile_is_labelled_and_profiles_round_trip(tmp_path):
    p = parametric_profile()
    assert p.parametric and "parametric, not measured" in p.label()
    path = save_profile(hand_profile(), tmp_path / "hand.json")
    back = load_profile(str(path))
    assert back.ops["A"] == OpCost(5000) and back.h2d_pageable == CopyCost(500, 1.0)
    assert back.path == str(path)
    with pytest.raises(UsageError):
        load_profile("no-such-profile")
    with pytest.raises(UsageError):
        profile_from_json({"name": "x"})
