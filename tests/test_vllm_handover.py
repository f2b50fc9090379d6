"""The handover run's reading of the probe's events, against hand-worked cases (no vLLM needed)."""

import json

import pytest

from labkit.errors import UsageError
from labkit.vllm.server import handover_probe
from labkit.vllm.server.handover import analyze, read_events


def _events(sends, *, entries=None, adds=None, t0=100.0):
    """Probe events for requests ``r0..``: handler starts ``entries``, handovers ``sends``, engine adds ``adds``
    (s after t0; api server pid 1, engine pid 2, the API server's CPU time = its clock)."""
    entries = entries if entries is not None else [0.01 * i for i in range(len(sends))]
    adds = adds if adds is not None else [s + 0.05 for s in sends]
    ev = [{"event": "api_entry", "t": t0 + t, "pid": 1, "cpu": t} for t in entries]
    ev += [{"event": "api_send", "t": t0 + t, "pid": 1, "cpu": t, "request_id": f"r{i}"} for i, t in enumerate(sends)]
    ev += [{"event": "engine_add", "t": t0 + t, "pid": 2, "cpu": 0.0, "request_id": f"r{i}"} for i, t in enumerate(adds)]
    return sorted(ev, key=lambda e: e["t"])


def _bench(n, ttft=2.0, t0=100.0):
    return {"start_times": [t0 + 0.001 * i for i in range(n)], "ttfts": [ttft + i for i in range(n)]}


def test_one_after_another_reads_as_such():
    # four requests prepared 1 s each, one after another: handovers at 1, 2, 3, 4 s
    rows, s = analyze(_events([1.0, 2.0, 3.0, 4.0]), _bench(4))
    assert s["handover"]["first_frac"] == pytest.approx(0.25)
    assert s["handover"]["mean_frac"] == pytest.approx(2.5 / 4)
    assert s["one_after_another"] == {"first_frac": 0.25, "mean_frac": 5 / 8}
    assert s["handover_s"] == {"first": 1.0, "mean": 2.5, "last": 4.0}
    assert s["engine_wait_s"] == pytest.approx(0.05)
    assert [r["order"] for r in rows] == [0, 1, 2, 3]
    assert s["api_server_cpu_s"] == pytest.approx(4.0)  # from the first handler start (cpu 0) to the last send
    assert "at 25% of the last handover's time and the mean at 62%" in s["text"]


def test_side_by_side_reads_as_such():
    # all prepared together: every handover within the last 5% of the time
    rows, s = analyze(_events([3.85, 3.9, 3.95, 4.0]), _bench(4))
    assert s["handover"]["first_frac"] == pytest.approx(3.85 / 4)
    assert s["handover"]["mean_frac"] > 0.95
    # rows are in handover order, whichever request came first
    rows, _ = analyze(_events([4.0, 1.0, 3.0, 2.0]), _bench(4))
    assert [r["api_send_s"] for r in rows] == [1.0, 2.0, 3.0, 4.0]
    assert [r["engine_add_s"] for r in rows] == pytest.approx([1.05, 2.05, 3.05, 4.05])


def test_the_clock_starts_at_the_first_request_sent():
    # the client's first start is t0 = 100 s; a first token 2 s after it is at 2 s
    rows, s = analyze(_events([1.0, 2.0]), _bench(2))
    assert s["first_token_s"]["first"] == pytest.approx(2.0)
    assert s["first_token_s"]["last"] == pytest.approx(0.001 + 3.0)


@pytest.mark.parametrize("drop", ["api_entry", "api_send", "engine_add"])
def test_a_stage_short_of_requests_is_refused(drop):
    ev = [e for e in _events([1.0, 2.0]) if not (e["event"] == drop and e.get("request_id", "r1") == "r1"
                                                 and e["t"] > 100.005)]
    with pytest.raises(UsageError, match=drop):
        analyze(ev, _bench(2))


def test_a_bench_without_details_is_refused():
    with pytest.raises(UsageError, match="save-detailed"):
        analyze(_events([1.0]), {"duration": 1.0})


def test_unmatched_engine_add_is_refused():
    ev = _events([1.0, 2.0])
    for e in ev:
        if e["event"] == "engine_add" and e["request_id"] == "r1":
            e["request_id"] = "other"
    with pytest.raises(UsageError, match="never added"):
        analyze(ev, _bench(2))


def test_read_events_merges_processes_in_time_order(tmp_path):
    (tmp_path / "events-1.jsonl").write_text(json.dumps({"event": "api_send", "t": 2.0}) + "\n")
    (tmp_path / "events-2.jsonl").write_text(json.dumps({"event": "engine_add", "t": 1.0}) + "\n\n")
    assert [e["t"] for e in read_events(tmp_path)] == [1.0, 2.0]
    (tmp_path / "events-3.jsonl").write_text("{not json\n")
    with pytest.raises(UsageError, match="events-3.jsonl line 1"):
        read_events(tmp_path)


def test_the_probe_logs_a_call_and_passes_it_through(tmp_path):
    class Core:
        def add_request(self, request, wave=0):
            return ("added", request.request_id, wave)

    class Client:
        async def add_request_async(self, request):
            return "sent"

    class Req:
        request_id, arrival_time = "abc", 12.5

    log = handover_probe._Log(tmp_path)
    assert handover_probe._wrap(Core, "add_request", log, "engine_add", with_request=True)
    assert not handover_probe._wrap(Core, "add_request", log, "engine_add", with_request=True)  # once
    assert handover_probe._wrap(Client, "add_request_async", log, "api_send", with_request=True)
    assert Core().add_request(Req(), wave=3) == ("added", "abc", 3)
    coro = Client().add_request_async(Req())  # awaits nothing: one send runs it (no event loop needed)
    with pytest.raises(StopIteration) as done:
        coro.send(None)
    assert done.value.value == "sent"
    got = read_events(tmp_path)
    assert [(e["event"], e["request_id"], e["arrival_time"]) for e in got] == [("engine_add", "abc", 12.5),
                                                                              ("api_send", "abc", 12.5)]
    assert all({"t", "wall", "cpu", "pid"} <= set(e) for e in got)


def test_no_folder_no_probe(monkeypatch):
    monkeypatch.delenv(handover_probe.ENV_VAR, raising=False)
    assert handover_probe.install_probe() == []


def _recorded(tmp_path, slug="box"):
    """A vllm_handover of 3 requests x 2 images (handovers at 1, 2, 4 s) and that machine's vllm_input
    (10 + 5 ms per image: the simulator's request costs 30 ms; its body takes the client 20 ms per
    image to serialize and the API server 2.5 ms per image to parse)."""
    from labkit.results import make_result, save_result

    rows, summary = analyze(_events([1.0, 2.0, 4.0]), _bench(3))
    ho = make_result("vllm_handover", rows, source="measured-cpu", machine={"slug": slug},
                     params={"requests": 3, "images_per_request": 2, "image_size": "1024x1536", "summary": summary})
    save_result(ho, tmp_path)
    save_result(make_result("vllm_input", [{"stage": "media_decode", "per_image_median_us": 10_000.0},
                                           {"stage": "add_request", "per_image_median_us": 5_000.0},
                                           {"stage": "hf_processor", "per_image_median_us": 4_000.0},
                                           {"stage": "client_serialize", "per_image_median_us": 20_000.0},
                                           {"stage": "request_parse", "per_image_median_us": 2_500.0}],
                            source="measured-cpu", machine={"slug": slug}), tmp_path)
    return ho


def test_the_simulators_assumption_is_set_beside_the_measurement(tmp_path):
    from labkit.viz.vllm import handover

    ho = _recorded(tmp_path)
    # media-first: 3 x 20 ms of decode, then 10 ms of the rest per request -> 70, 80, 90 ms
    assert handover.assumed_handovers(ho, tmp_path) == pytest.approx([0.07, 0.08, 0.09])
    # one after another: 30 ms per request (media_decode + add_request, 2 images)
    assert handover.assumed_handovers(ho, tmp_path, "one-after-another") == pytest.approx([0.03, 0.06, 0.09])
    table = handover.handover_table(ho, tmp_path).set_index("quantity")
    assert table.loc["first handover (s)", "measured"] == pytest.approx(1.0)
    assert table.loc["first handover (s)", "media-first, all in at once"] == pytest.approx(0.07)
    # client-paced: bodies in at 40, 80, 120 ms; request 0 parsed 40-45, decoded 45-65 and processed
    # 65-75 while body 1 is still coming; 1: 80-85, 85-105, 105-115; 2: 120-125, 125-145, 145-155
    assert table.loc["first handover (s)", "simulator: media-first, client-paced"] == pytest.approx(0.075)
    assert table.loc["last handover (s)", "simulator: media-first, client-paced"] == pytest.approx(0.155)
    # its API server's CPU per request: the request's whole processing and its parse (30 + 5 ms)
    assert table.loc["API server CPU per request (s)", "simulator: media-first, client-paced"] == pytest.approx(0.035)
    assert table.loc["first handover (s)", "one after another"] == pytest.approx(0.03)
    assert table.loc["mean / last", "measured"] == pytest.approx(7 / 12)
    assert table.loc["first / last", "one after another"] == pytest.approx(1 / 3)
    assert table.loc["first / last", "media-first, all in at once"] == pytest.approx(7 / 9)
    fig = handover.plot_handovers(ho, tmp_path)
    assert [t.name for t in fig.data][-3:] == [
        "simulator's API server, media-first, client-paced (vllm_input's stages)",
        "simulator's API server, media-first, all in at once (vllm_input's stages)",
        "simulator's API server, one after another (vllm_input's stages)"]
    assert list(fig.data[1].y) == [1.0, 2.0, 4.0]


def test_no_input_result_no_assumption_and_no_result_a_note(tmp_path):
    from labkit.viz.vllm import handover

    ho = _recorded(tmp_path)
    assert handover.assumed_handovers(ho, tmp_path / "elsewhere") is None
    assert handover.recorded_handovers(tmp_path / "none") == []
    assert handover.NO_HANDOVER in handover.plot_handovers(None).layout.annotations[0].text
    assert handover.handover_table(None).empty


def test_gil_samples_by_stage_first_match_wins():
    from labkit.vllm.server.handover import gil_shares, gil_text

    raw = "\n".join([
        "run (asyncio/runners.py:118);on_body (uvicorn/protocols/http/httptools_impl.py:314) 10",
        # starlette's request.json() parses the body: the parse counts as JSON, not as the HTTP body
        "run;json (starlette/requests.py:268);loads (json/__init__.py:341);raw_decode (json/decoder.py:353) 5",
        # the renderer's processor calls into PIL: it counts as the processor, not as image decode
        "worker;_process_multimodal (vllm/renderers/base.py:1);copy (PIL/Image.py:1363) 3",
        "worker;load_base64 (vllm/multimodal/media/image.py:105);load (PIL/ImageFile.py:425) 2",
        "run;select (selectors.py:468) 4",
        "",
    ])
    got = gil_shares(raw, rate_hz=20, requests=2)
    assert {k: v["samples"] for k, v in got.items()} == {
        "JSON parse": 5, "HTTP body in": 10, "processor (renderer)": 3, "image decode": 2,
        "send to the engine core": 0, "outputs": 0, "other": 4}
    assert got["HTTP body in"]["share"] == pytest.approx(10 / 24)
    assert got["HTTP body in"]["held_s"] == pytest.approx(0.5) and got["HTTP body in"]["per_request_s"] == 0.25
    assert gil_text(got).startswith("The API server held the GIL, per request: JSON parse 0.12 s (21%), "
                                    "HTTP body in 0.25 s (42%)")
    with pytest.raises(UsageError, match="line 1"):
        gil_shares("no count here")
