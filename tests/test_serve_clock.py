"""The simulated clock and the API server's thread on a hand-worked three-request run.

Three requests, one image each, three output tokens, every request's input processing 10 time
units, the engine core's host 2 per step, the device 8 for a step with prefill and 5 without,
each output job 1. The engine is a hand-made one (every joined request prefills in one step, then
decodes one token per step). The token times below were worked out by hand, step by step, in
the order the module text states (admission at the step's start; async: a step takes
max(host, device) and its outputs reach the API server with the next step; the API server takes
output jobs that arrived before it finishes a job, then the next request's inputs).
"""

from __future__ import annotations

import pytest

from labkit.serve.api_server import ApiServer, OutputJob
from labkit.serve.clock import Delivery, StepRecord, simulate
from labkit.serve.device import StepShape

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
        rec = StepRecord(self.steps, StepShape(decode, prefill, len(prefill)), {}, tuple(out))
        self.steps += 1
        return rec

    def flush(self):
        return ()


class FixedHost:
    def core_ns(self, rec):
        return {"schedule": 1.5, "update_from_output": 0.5}

    def frontend_ns(self, outputs):
        return 1.0


def device(shape: StepShape) -> float:
    return 8.0 if shape.prefill_chunks else 5.0


def _run(async_scheduling: bool):
    return simulate(HandEngine(), input_ns=[10.0] * 3, host=FixedHost(), device=device,
                    async_scheduling=async_scheduling)


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


def test_steps_record_shape_and_bounds():
    tl = _run(True)
    first = tl.steps[0]
    assert (first.decode_requests, first.prefill_tokens, first.images_encoded, first.admitted) == (0, PROMPT, 1, 1)
    assert not any(s.host_bound for s in tl.steps)  # host 2 < device 5 or 8
    assert tl.api_busy_inputs_ns == 30.0 and tl.api_busy_outputs_ns == 6.0


def test_api_server_takes_arrived_outputs_before_the_next_inputs():
    api = ApiServer([10.0, 10.0])
    api.advance(1.0)  # request 0's inputs start at 0
    assert api.handover_ns == [10.0, None]
    api.submit(OutputJob(5.0, 0, 2.0))  # arrives while request 0's inputs run
    api.advance(11.0)
    assert api.finished_outputs[0].done_ns == 12.0  # taken at 10, before request 1's inputs
    assert api.handover_ns == [10.0, None]  # request 1's inputs start at 12, not before 11
    api.advance(13.0)
    assert api.handover_ns == [10.0, 22.0]


def test_api_server_idles_until_outputs_arrive():
    api = ApiServer([1.0])
    api.submit(OutputJob(5.0, 0, 1.0))
    api.advance(4.0)
    assert api.handover_ns == [1.0] and not api.finished_outputs  # nothing starts before 4
    api.drain()
    assert api.finished_outputs[0].done_ns == 6.0


def test_next_handover_after_a_time():
    api = ApiServer([3.0, 3.0])
    assert api.next_handover_ns(0.0) == 3.0
    assert api.next_handover_ns(3.0) == 6.0
    assert api.next_handover_ns(6.0) is None


def test_engine_that_never_finishes_is_an_error():
    class Stuck(HandEngine):
        def step(self):
            rec = super().step()
            return StepRecord(rec.index, rec.shape, {}, ())  # never delivers

    with pytest.raises(RuntimeError):
        simulate(Stuck(), input_ns=[1.0], host=FixedHost(), device=device, max_steps=50)


def test_media_first_three_requests_by_hand():
    from labkit.serve.api_server import input_jobs

    # each request: 6 of image decode, 4 of processor work (10 in all, as above); every decode first,
    # so request 0 is handed over at 6 + 6 + 6 + 4 = 22, then 26 and 30, not at 10, 20, 31
    jobs = input_jobs([6.0] * 3, [4.0] * 3, "media-first")
    # (ns, handed over, not before, after job): each processor job waits for its request's decode
    assert jobs == [(6.0, None, 0.0, None)] * 3 + [(4.0, 0, 0.0, 0), (4.0, 1, 0.0, 1), (4.0, 2, 0.0, 2)]
    tl = simulate(HandEngine(), input_jobs=jobs, host=FixedHost(), device=device)
    assert tl.handover_ns == [22.0, 26.0, 30.0]
    # step 0 prefills request 0 (22-30); step 1 decodes it and prefills 1 and 2 (30-38); two decode steps
    assert [(s.start_ns, s.end_ns) for s in tl.steps] == [(22, 30), (30, 38), (38, 43), (43, 48)]
    # each step's outputs cost the API thread 1 once the next step is planned (async)
    assert tl.token_ns == [[31.0, 39.0, 44.0], [39.0, 44.0, 49.0], [39.0, 44.0, 49.0]]
    assert input_jobs([6.0], [4.0], "one-after-another") == [(10.0, 0, 0.0, None)]
    with pytest.raises(ValueError, match="media-first"):
        input_jobs([6.0], [4.0], "sideways")
    with pytest.raises(ValueError, match="exactly one job"):
        ApiServer(jobs=[(1.0, None), (1.0, 1)])
    with pytest.raises(ValueError, match="exactly one job"):
        ApiServer(jobs=[(1.0, 0), (1.0, 0)])


def _job(ready, step, cost, requests, stream):
    from labkit.serve.clock import Delivery

    return OutputJob(ready, step, cost, [Delivery(step, r, 1) for r in requests], stream_per_request_ns=stream)


def test_outputs_waiting_for_the_api_thread_merge_into_one_chunk_per_stream():
    # inputs busy until 10; two steps' outputs for requests 0 and 1 ready at 3 and 5, each 1 of
    # output processing and 2 per stream's chunk: merged, 1 + 1 + 2 x 2 streams = 6, both done at 16
    api = ApiServer([10.0], merge_outputs=True)
    api.submit(_job(3.0, 0, 1.0, (0, 1), 2.0))
    api.submit(_job(5.0, 1, 1.0, (0, 1), 2.0))
    api.drain()
    assert [j.done_ns for j in api.finished_outputs] == [16.0, 16.0]
    assert api.busy_outputs_ns == 6.0 and api.merged_jobs == 1


def test_without_merging_each_step_pays_its_chunks():
    # the same jobs one at a time: 10 + 1 + 4 = 15, then 15 + 1 + 4 = 20
    api = ApiServer([10.0])
    api.submit(_job(3.0, 0, 1.0, (0, 1), 2.0))
    api.submit(_job(5.0, 1, 1.0, (0, 1), 2.0))
    api.drain()
    assert [j.done_ns for j in api.finished_outputs] == [15.0, 20.0]
    assert api.merged_jobs == 0


def test_only_outputs_already_there_merge():
    # the second step's outputs come at 12, after the thread took the first (at 10): not merged
    api = ApiServer([10.0], merge_outputs=True)
    api.submit(_job(3.0, 0, 1.0, (0,), 2.0))
    api.submit(_job(12.0, 1, 1.0, (0, 1), 2.0))
    api.drain()
    assert [j.done_ns for j in api.finished_outputs] == [13.0, 18.0]


def test_bodies_parsed_as_they_come_and_the_thread_never_idles_while_a_job_is_ready():
    from labkit.serve.api_server import input_jobs

    # the API thread parses a body in 1, decodes a request's images in 2, processes it in 3 (media first)
    # bodies in at 1, 2, 3 (the thread is the bottleneck): every parse, every decode, then the processors:
    # parse 0 1-2, decode 0 2-4, parse 1 4-5, parse 2 5-6, decode 1 6-8, decode 2 8-10, then 10-13, 13-16, 16-19
    api = ApiServer(jobs=input_jobs([2.0] * 3, [3.0] * 3, "media-first", parse_ns=[1.0] * 3, body_ns=[1.0, 2.0, 3.0]))
    api.drain()
    assert api.handover_ns == [13.0, 16.0, 19.0]
    # bodies in at 5, 10, 15 (the client is): request 0 is processed while body 1 is still coming:
    # parse 0 5-6, decode 0 6-8, process 0 8-11, parse 1 11-12, decode 1 12-14, process 1 14-17, ...
    api = ApiServer(jobs=input_jobs([2.0] * 3, [3.0] * 3, "media-first", parse_ns=[1.0] * 3, body_ns=[5.0, 10.0, 15.0]))
    api.drain()
    assert api.handover_ns == [11.0, 17.0, 23.0]
    assert api.busy_inputs_ns == 18.0


def test_a_job_waits_only_for_one_before_it():
    with pytest.raises(ValueError, match="before it"):
        ApiServer(jobs=[(1.0, 0, 0.0, 1), (1.0, None, 0.0, None)])


def test_metrics_count_from_each_requests_start():
    from labkit.serve.metrics import compute_metrics

    # request 1 started at 2 s (the client serialized request 0 first): its TTFT and latency from 2
    m = compute_metrics([[3.0, 4.0], [5.0, 7.0]], [10, 10], start_s=[0.0, 2.0])
    assert m.mean_ttft_ms == pytest.approx(3000.0)  # (3 + 3) / 2
    assert m.mean_e2el_ms == pytest.approx(4500.0)  # (4 + 5) / 2
    assert m.duration_s == 7.0  # the last token since the benchmark's start
    assert m.mean_tpot_ms == pytest.approx(1500.0)


def test_side_by_side_three_requests_by_hand():
    from labkit.serve.api_server import input_jobs

    # bodies in at 2, 4, 6; parsing each costs 1; each request then 6 of decode + 4 of processor
    # work, cut in two halves of 5 for side-by-side. By hand: parse 0 (2-3), half 1 of request 0
    # (3-8), parses 1 and 2 (8-10), halves 1 of requests 1 and 2 (10-20), then the second halves:
    # request 0 handed over at 25, 1 at 30, 2 at 35
    kw = dict(parse_ns=[1.0] * 3, body_ns=[2.0, 4.0, 6.0])
    jobs = input_jobs([6.0] * 3, [4.0] * 3, "side-by-side", slices=2, **kw)
    assert len(jobs) == 3 + 3 * 2 and [j[0] for j in jobs[3:]] == [5.0] * 6
    handovers = {}
    for order, extra in (("side-by-side", {"slices": 2}), ("media-first", {}), ("one-after-another", {})):
        api = ApiServer(jobs=input_jobs([6.0] * 3, [4.0] * 3, order, **kw, **extra))
        api.drain()
        handovers[order] = api.handover_ns
    assert handovers["side-by-side"] == [25.0, 30.0, 35.0]
    # the same intake media-first: decodes 3-9, 11-17, 17-23 (parses 1 and 2 at 9-11), then processors
    assert handovers["media-first"] == [27.0, 31.0, 35.0]
    # one after another: request 0 whole at 3-13, parses 13-15, then requests 1 and 2
    assert handovers["one-after-another"] == [13.0, 25.0, 35.0]
    with pytest.raises(ValueError, match="slice"):
        input_jobs([6.0], [4.0], "side-by-side", slices=0)
