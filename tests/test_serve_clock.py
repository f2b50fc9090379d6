"""The simulated clock and the API server's thread on a hand-worked three-request run.

Three requests, one image each, three output tokens, every request's body parsed
in 10 time units (no images to decode, no processor work), the engine core's host 2 per step, the device 8 for a step with prefill and 5 without,
each output job 1. The engine is a hand-made one (every joined request prefills in one step, then
decodes one token per step). The token times below were worked out by hand, step by step, in
the order the module text states (admission at the step's start; async: a step takes
max(host, device) and its outputs reach the API server with the next step; the API server takes
output jobs that arrived before it finishes a job, then the next request's parse).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from labkit.serve.api_server import ApiServer, Intake, OutputJob
from labkit.serve.clock import simulate
from labkit.step_model import Delivery, ScheduledStep, StepShape

PROMPT, OUTPUT = 5, 3


class HandEngine:
    """Every joined request prefills (whole prompt, one image) in one step, then decodes."""

    def __init__(self) -> None:
        self.joined: list[int] = []
        self.tokens: dict[int, int] = {}
        self.steps = 0

    def add_request(self, index: int) -> None:
        self.joined.append(index)

    def _live(self):
        return [i for i in self.joined if self.tokens.get(i, 0) < OUTPUT]

    def has_work(self) -> bool:
        return bool(self._live())

    def step(self):
        live = self._live()
        decode = tuple(PROMPT + self.tokens[i] - 1 for i in live if i in self.tokens)
        prefill = tuple((PROMPT, 0, True) for i in live if i not in self.tokens)
        out = []
        for i in live:
            self.tokens[i] = self.tokens.get(i, 0) + 1
            out.append(Delivery(self.steps, i, 1, self.tokens[i] == OUTPUT))
        rec = ScheduledStep(self.steps, StepShape(decode, prefill, len(prefill)), tuple(out))
        self.steps += 1
        return rec

    def flush(self):
        return ()


class FixedHost:
    def core_ns(self, shape):
        return 2.0

    def frontend_ns(self, outputs):
        return 1.0


def device(shape: StepShape) -> float:
    return 8.0 if shape.prefill_chunks else 5.0


def _run(async_scheduling: bool):
    return simulate(HandEngine(), requests=3, intake=_parse_only(10.0), host=FixedHost(), device=device,
                    regime="async" if async_scheduling else "sync")


def test_async_three_requests_by_hand():
    tl = _run(True)
    assert tl.handover_ns == [10.0, 20.0, 31.0]
    assert tl.token_ns == [[21.0, 32.0, 33.0], [33.0, 40.0, 45.0], [40.0, 45.0, 50.0]]
    assert [(s.start_ns, s.end_ns) for s in tl.steps] == [(10, 18), (18, 23), (23, 31), (31, 39), (39, 44),
                                                          (44, 49)]
    ttft = [ts[0] for ts in tl.token_ns]
    tpot = [(ts[-1] - ts[0]) / (OUTPUT - 1) for ts in tl.token_ns]
    assert ttft == [21.0, 33.0, 40.0] and tpot == [6.0, 6.0, 5.0]
    assert max(ts[-1] for ts in tl.token_ns) == 50.0  # duration


def test_sync_three_requests_by_hand():
    tl = _run(False)
    assert tl.handover_ns == [10.0, 20.0, 31.0]
    assert tl.token_ns == [[21.0, 32.0, 38.0], [32.0, 38.0, 48.0], [48.0, 55.0, 62.0]]
    assert [s.end_ns - s.start_ns for s in tl.steps] == [10, 10, 7, 10, 7, 7]  # host 2 + device
    assert [(ts[-1] - ts[0]) / 2 for ts in tl.token_ns] == [8.5, 8.0, 7.0]


def test_non_overlap_lengthens_every_step_by_hand():
    tl = simulate(HandEngine(), requests=3, intake=_parse_only(10.0), host=FixedHost(), device=device,
                  non_overlap_ns=1.0)
    # async: max(host 2, device 8 or 5) + 1
    assert [s.end_ns - s.start_ns for s in tl.steps] == [9, 6, 9, 9, 6, 6]


def test_steps_record_shape_and_bounds():
    tl = _run(True)
    first = tl.steps[0]
    assert (first.decode_requests, first.prefill_tokens, first.images_encoded, first.admitted) == (0, PROMPT, 1, 1)
    assert not any(s.host_bound for s in tl.steps)  # host 2 < device 5 or 8
    assert tl.api_busy_inputs_ns == 30.0 and tl.api_busy_outputs_ns == 6.0


def _parse_only(parse: float) -> Intake:
    return Intake(parse, 0.0, 0.0, images=0)


def test_api_server_takes_arrived_outputs_before_the_next_parse():
    api = ApiServer(2, _parse_only(10.0))
    api.advance(1.0)  # request 0's parse starts at 0
    assert api.handover_ns == [10.0, None]
    api.submit(OutputJob(5.0, 0, 2.0))  # arrives while request 0's parse runs
    api.advance(11.0)
    assert api.finished_outputs[0].done_ns == 12.0  # taken at 10, before request 1's parse
    assert api.handover_ns == [10.0, None]  # request 1's parse starts at 12, not before 11
    api.advance(13.0)
    assert api.handover_ns == [10.0, 22.0]


def test_api_server_idles_until_outputs_arrive():
    api = ApiServer(1, _parse_only(1.0))
    api.submit(OutputJob(5.0, 0, 1.0))
    api.advance(4.0)
    assert api.handover_ns == [1.0] and not api.finished_outputs  # nothing starts before 4
    api.drain()
    assert api.finished_outputs[0].done_ns == 6.0


def test_next_handover_after_a_time():
    api = ApiServer(2, _parse_only(3.0))
    assert api.next_handover_ns(0.0) == 3.0
    assert api.next_handover_ns(3.0) == 6.0
    assert api.next_handover_ns(6.0) is None


# Three requests, parse 1 each, two images each of 4 on a pool of two workers, the processor 6 per
# request on its one worker. By hand: parses end at 1, 2, 3. Request 0's images run 1-5 on both
# workers, its processor 5-11. Request 1's images wait for the workers (free at 5): 5-9; the
# processor is busy until 11, so 11-17. Request 2: images 9-13, processor 17-23.
POOL = Intake(1.0, 4.0, 6.0, images=2, media_threads=2)


def _handovers(intake: Intake, requests: int = 3) -> list:
    api = ApiServer(requests, intake)
    api.drain()
    return api.handover_ns


def test_intake_pool_and_single_processor_by_hand():
    assert _handovers(POOL) == [11.0, 17.0, 23.0]


def test_intake_stage_orders_matter():
    # one media worker: request 0's images run 1-5 and 5-9, processor 9-15; request 1: 9-17, 17-23;
    # request 2: 17-25, 25-31
    assert _handovers(Intake(1.0, 4.0, 6.0, images=2, media_threads=1)) == [15.0, 23.0, 31.0]
    # the processor the bottleneck: handovers 6 apart, whatever the pool does
    slow = Intake(1.0, 1.0, 6.0, images=2, media_threads=8)
    assert _handovers(slow) == [8.0, 14.0, 20.0]
    # bodies in at 0, 10, 10 (a run's own arrivals): request 0's images 0-4, processor 4-10; request 1's
    # images take both workers 10-14, processor 14-20; request 2's images wait for them: 14-18, its
    # processor for request 1's: 20-26
    assert _handovers(replace(POOL, arrivals_ns=(0.0, 10.0, 10.0))) == [10.0, 20.0, 26.0]
    # the k-th processor call's own time, 2, then 9, then 1: request 0's images 1-5, processor 5-7;
    # request 1's images 5-9, processor 9-18; request 2's images 9-13, processor 18-19
    assert _handovers(replace(POOL, process_each_ns=(2.0, 9.0, 1.0))) == [7.0, 18.0, 19.0]
    # scaling every stage scales every handover (one request: no queueing)
    assert _handovers(POOL.scaled(2.0), 1) == [22.0]
    assert _handovers(POOL.scaled(2.0, ("process_ns",)), 1) == [17.0]


def test_intake_rejects_nonsense():
    with pytest.raises(ValueError):
        Intake(1.0, -1.0, 0.0, images=1).check()
    with pytest.raises(ValueError):
        Intake(1.0, 1.0, 0.0, images=1, media_threads=0).check()


def test_engine_that_never_finishes_is_an_error():
    class Stuck(HandEngine):
        def step(self):
            rec = super().step()
            return ScheduledStep(rec.index, rec.shape, ())  # never delivers

    with pytest.raises(RuntimeError):
        simulate(Stuck(), requests=1, intake=_parse_only(1.0), host=FixedHost(), device=device, max_steps=50)
