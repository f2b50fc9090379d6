"""The step census's parts that need no vLLM: wrapper timers on stand-in objects with a fake clock, the
derived phases, the census's checks on hand-made rows, the input-processing statement, and the
command line's bad input (the real engine runs in tests/vllm_cpu/)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from labkit.errors import UsageError
from labkit.vllm import step_census
from labkit.vllm.input_processing import ttft_statement
from labkit.vllm.step_checks import census_checks
from labkit.vllm.step_timers import PhaseTimers


class _Clock:
    """A clock that moves only when told (ns)."""

    def __init__(self):
        self.t = 0

    def __call__(self):
        return self.t


class _Out:
    def __init__(self, tokens, new=()):
        self.num_scheduled_tokens = tokens
        self.total_num_scheduled_tokens = sum(tokens.values())
        self.scheduled_new_reqs = list(new)


def _parts(clock):
    """Stand-ins for the engine's objects: each method advances the clock by a fixed amount."""

    class Scheduler:
        def schedule(self):
            clock.t += 100
            for _ in range(3):
                self._try_schedule_encoder_inputs()
            return _Out({"a": 1, "b": 1})

        def _try_schedule_encoder_inputs(self):
            clock.t += 10

        def update_from_output(self):
            clock.t += 40

    class Executor:
        def execute_model(self):
            clock.t += 5
            return runner.execute_model()

        def sample_tokens(self):
            clock.t += 30

    class Runner:
        def execute_model(self):
            clock.t += 20
            self._model_forward()
            return "out"

        def _model_forward(self):
            clock.t += 200
            self._model_forward_inner()

        def _model_forward_inner(self):
            clock.t += 1

    class Processor:
        def process_outputs(self):
            clock.t += 50

    class Engine:
        def step(self):
            clock.t += 7  # glue outside every phase
            scheduler.schedule()
            executor.execute_model()
            executor.sample_tokens()
            scheduler.update_from_output()
            processor.process_outputs()

    scheduler, executor, runner, processor, engine = Scheduler(), Executor(), Runner(), Processor(), Engine()
    return {"engine": engine, "scheduler": scheduler, "executor": executor, "runner": runner,
            "output_processor": processor}


PHASES = (("step", "engine", "step"), ("schedule", "scheduler", "schedule"),
          ("encoder_inputs", "scheduler", "_try_schedule_encoder_inputs"),
          ("execute_model", "executor", "execute_model"), ("model_forward", "runner", "_model_forward"),
          ("forward_again", "runner", "_model_forward_inner"), ("sample", "executor", "sample_tokens"),
          ("update_from_output", "scheduler", "update_from_output"),
          ("process_outputs", "output_processor", "process_outputs"))


def test_wrapper_timers_time_each_phase_once_and_restore_the_objects():
    clock = _Clock()
    parts = _parts(clock)
    before = dict(vars(parts["runner"]))
    with PhaseTimers(parts=parts, phases=PHASES, clock=clock) as timers:
        parts["engine"].step()
        parts["engine"].step()
    assert vars(parts["runner"]) == before and "schedule" not in vars(parts["scheduler"])
    assert len(timers.steps) == 2
    rec = timers.steps[0]
    # schedule: 100 own + 3 x 10 encoder checks; execute_model: 5 + 20 + 200 + 1; step: all of it + 7
    assert rec.phases_ns == {"schedule": 130, "encoder_inputs": 30, "execute_model": 226, "model_forward": 201,
                             "forward_again": 1, "sample": 30, "update_from_output": 40, "process_outputs": 50,
                             "step": 7 + 130 + 226 + 30 + 40 + 50}
    assert rec.requests == 2 and rec.tokens == 2 and rec.decode_only
    parts["engine"].step()  # outside the timers: nothing recorded
    assert len(timers.steps) == 2


def test_derived_phases_follow_the_trace_tables_rules():
    d = step_census._derived({"step": 1000_000, "schedule": 100_000, "execute_model": 600_000,
                              "model_forward": 380_000, "logits": 30_000, "encoder": 10_000, "sample": 60_000,
                              "update_from_output": 40_000, "process_outputs": 40_000})
    assert d["forward"] == pytest.approx(410) and d["prepare_inputs"] == pytest.approx(180)
    assert d["other"] == pytest.approx(1000 - (100 + 180 + 10 + 410 + 60 + 40 + 40))


def _rows(base_sched, merged_sched, *, trace_ratio=1.0, share=0.99, alone=None):
    rows = []
    for v, sched in (("baseline", base_sched), ("merged", merged_sched)):
        step = sched + 900.0
        rows.append({"variant": v, "num_requests": 128, "images": 32, "phase": "step", "median_us": step,
                     "named_share": share, "trace_named_share": share, "wrapper_profiled_median_us": 2 * step,
                     "trace_vs_wrapper": 1.0})
        for p, us in (("schedule", sched), ("prepare_inputs", 500.0), ("encoder", 4.0), ("forward", 300.0),
                      ("sample", 50.0), ("update_from_output", 20.0), ("process_outputs", 20.0)):
            rows.append({"variant": v, "num_requests": 128, "images": 32, "phase": p, "median_us": us,
                         "wrapper_profiled_median_us": 2 * us, "trace_vs_wrapper": trace_ratio if us > 10 else 0.6})
        if alone is not None:
            rows.append({"variant": v, "num_requests": 128, "images": 32, "phase": "scheduler_only",
                         "median_us": alone[v]})
    return rows


def test_census_checks_pass_on_a_consistent_census():
    checks = census_checks(_rows(6000.0, 200.0, alone={"baseline": 5600.0, "merged": 150.0}))
    assert {c["check"] for c in checks} == {"phases add up", "trace agrees with the timers",
                                            "schedule saving matches the scheduler alone"}
    assert all(c["passed"] for c in checks), checks
    agree = next(c for c in checks if c["check"] == "trace agrees with the timers")
    assert "not held: encoder 0.600" in agree["detail"]  # 4 us of a ~1.8 ms profiled step


@pytest.mark.parametrize("bad, which", [
    (dict(share=0.93), "phases add up"),
    (dict(trace_ratio=1.12), "trace agrees with the timers"),
    (dict(alone={"baseline": 4000.0, "merged": 150.0}), "schedule saving matches the scheduler alone"),
])
def test_census_checks_fail_where_the_census_is_inconsistent(bad, which):
    kwargs = {"alone": {"baseline": 5600.0, "merged": 150.0}, **bad}
    checks = census_checks(_rows(6000.0, 200.0, **kwargs))
    failed = {c["check"] for c in checks if not c["passed"]}
    assert failed == {which}


def test_ttft_statement_worked_by_hand():
    # 10 ms decode + 90 ms add_request per image -> 0.1 s; 32 images -> 3.2 s a request;
    # 128 requests one after another wait (128 + 1) / 2 x 3.2 = 206.4 s on average
    rows = [{"stage": "media_decode", "per_image_median_us": 10_000.0},
            {"stage": "add_request", "per_image_median_us": 90_000.0}]
    s = ttft_statement(rows, {"before": 137.9, "after": 124.3, "requests": 128, "images": 32})
    assert s["per_request_s"] == pytest.approx(3.2) and s["mean_wait_s"] == pytest.approx(206.4)
    assert s["share_of_ttft_before"] == pytest.approx(206.4 / 137.9)
    assert s["host_speedup_needed"] == pytest.approx(206.4 / 124.3)
    assert "206.4 s" in s["text"] and "13.6 s TTFT drop" in s["text"]
    fast = ttft_statement([{"stage": "media_decode", "per_image_median_us": 100.0},
                           {"stage": "add_request", "per_image_median_us": 900.0}],
                          {"before": 137.9, "after": 124.3, "requests": 128, "images": 32})
    assert fast["host_speedup_needed"] is None and "faster than this CPU" not in fast["text"]
    with pytest.raises(UsageError):
        ttft_statement(rows[:1])


def test_census_plan_sizes_the_engine_for_every_point():
    plan = step_census.CensusPlan(points=((128, 32), (8, 1)), rounds=2, block=3, profiled=2, wave=16)
    assert plan.decode_steps == 4 * (2 * 4 + 2 + 2) + 8
    # 8 waves of 16 requests, 24 steps' slack each, on top of the census's own steps
    assert plan.max_tokens(128) == plan.decode_steps + 8 * 24 + 64
    assert step_census.prompt_tokens(plan, 32) == 32 * 262 + step_census.PROMPT_TEXT_TOKENS
    need = 128 * (step_census.prompt_tokens(plan, 32) + plan.max_tokens(128)) * 1024
    assert step_census.kv_cache_gib(plan) == -(-need // 2**30)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "labkit", "bench", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("args, words", [
    (["vllm-step", "--rounds", "0"], "--rounds must be >= 1"),
    (["vllm-step", "--requests", "200"], "requests must be in 1..128"),
    (["vllm-step", "--variants", "nope"], "unknown vLLM A/B variant"),
    (["vllm-step", "--variants", "pr38794"], "pr38794 equals baseline"),
    (["vllm-step", "--whatif-check", "missing-a.json", "missing-b.json"], "no such trace file"),
    (["vllm-input", "--image-size", "big"], "--image-size must look like"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    p = _cli(*args)
    assert p.returncode == 2, p.stderr
    assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_without_vllm_the_census_says_where_to_run_it():
    pytest.importorskip("pandas")
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    p = _cli("vllm-step", "--no-save")
    assert p.returncode == 2 and "vLLM is not installed" in p.stderr


def test_scheduler_alone_never_times_the_step_after_a_switch(monkeypatch):
    """Switching a variant clears the cumsums cached under the other definition, so the first step
    after each switch recomputes them all: the scheduler-alone figure must leave that step out, as
    the census does. A stand-in scheduler whose step costs 1000 ns right after its variant was
    applied and 10 ns otherwise: every timed median is the steady 10 ns."""
    import contextlib

    import labkit.vllm.ab as ab
    import labkit.vllm.sched_census as sc
    from labkit.vllm.step_checks import scheduler_only_point

    state = {"active": None, "fresh": False}

    @contextlib.contextmanager
    def fake_patched(name):
        state.update(active=name, fresh=True)
        yield
        state.update(active=None)

    class Out:
        def __init__(self, n):
            self.num_scheduled_tokens = {f"r{i}": 1 for i in range(n)}
            self.scheduled_encoder_inputs = {}

    class FakeRun:
        def __init__(self, _sched, reqs):
            self.n = reqs

        def run_to_decode(self):
            return 0

        def step(self):
            cost = 1000 if state["fresh"] else 10
            state["fresh"] = False
            return cost, 0, Out(self.n)

    monkeypatch.setattr(ab, "patched_vllm", fake_patched)
    monkeypatch.setattr(sc, "SchedulerRun", FakeRun)
    monkeypatch.setattr(sc, "make_scheduler", lambda *a, **k: None)
    monkeypatch.setattr(sc, "make_requests", lambda n, m, prefix="": n)
    monkeypatch.setattr(sc, "temporary_model_dir", lambda: contextlib.nullcontext("model"))
    rows = scheduler_only_point(3, 2, steps=8, block=4, warmup=1)
    assert {r["variant"]: (r["median_us"], r["steps"]) for r in rows} == {"baseline": (0.01, 8), "merged": (0.01, 8)}
