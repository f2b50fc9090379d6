"""Notebook 08's "when the real server hands each request to the engine": the recorded ``vllm_handover``.

``labkit bench vllm-handover`` (:mod:`labkit.vllm.server.handover`) timed, in a real ``vllm serve``,
when each request's handler started, when its inputs were handed to the engine core and when
its first token reached the client. Here they are set beside what the serving simulator's API
server assumes (:mod:`labkit.serve.api_server`: one thread, every request's image decode first and
then each request's processor work, or each request whole one after another; each costing the
``vllm_input`` stages the simulator reads, per image, recorded on the same machine).

- :func:`recorded_handovers`: every machine's recorded result, this machine's first;
- :func:`assumed_handovers`: the simulator's handover times for the run's shape, from that machine's ``vllm_input``;
- :func:`handover_table`: the summary beside both orders;
- :func:`plot_handovers`: per request (in handover order) its stages' times, and both orders as lines.
"""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.viz.vllm.inside_vllm import _per_machine, no_result

__all__ = ["HANDOVER_RESULT", "NO_HANDOVER", "recorded_handovers", "assumed_handovers", "handover_table",
           "plot_handovers"]

HANDOVER_RESULT = "vllm_handover"
NO_HANDOVER = ("no vllm_handover result recorded yet: run `.venv-vllm-cpu/bin/labkit bench vllm-handover --size full` "
               "(a few minutes)")
_STAGES = (("api_entry_s", "handler starts (HTTP body in)", "#9aa5b1"),
           ("api_send_s", "handed to the engine core", "#1f5fa8"),
           ("first_token_s", "first token at the client", "#c8553d"))


def recorded_handovers(root=None) -> list:
    """Every machine's recorded ``vllm_handover`` (full where there is one), this machine's first."""
    return _per_machine(HANDOVER_RESULT, root)


def _input_costs(result, root=None) -> tuple | None:
    """One request's ``(image decode, the rest, {intake stage: ns} or None)`` in ns from the
    ``vllm_input`` stages recorded on ``result``'s machine (unscaled), or None where it recorded none."""
    from labkit.errors import UsageError
    from labkit.results import load_results
    from labkit.serve.inputs import intake_ns, per_image_input_ns

    found = [r for r in load_results(root, name="vllm_input") if r.slug == result.slug]
    if not found:
        return None
    per_image_ns, stages = per_image_input_ns({"rows": found[0].rows})
    k = result.params["images_per_request"]
    media = stages["media_decode"]["per_image_ns"] * k
    try:
        intake = {s: v * k for s, v in intake_ns({"rows": found[0].rows}).items()}
    except UsageError:  # recorded before the intake stages
        intake = None
    return media, per_image_ns * k - media, intake


def _handover_times(costs, n: int, order: str, intake: bool = False) -> list[float] | None:
    """The simulator's handovers (s): ``intake``, as serve-sim runs by default (the client serializes
    each body in turn, the API server parses each before its images)."""
    from labkit.serve.api_server import ApiServer, input_jobs

    if costs is None or (intake and costs[2] is None):
        return None
    extra = {}
    if intake:
        c = costs[2]
        extra = {"parse_ns": [c["request_parse"]] * n, "body_ns": [(i + 1) * c["client_serialize"] for i in range(n)]}
    api = ApiServer(jobs=input_jobs([costs[0]] * n, [costs[1]] * n, order, **extra))
    api.drain()
    return [t / 1e9 for t in api.handover_ns]


def assumed_handovers(result, root=None, order: str = "media-first") -> list[float] | None:
    """The simulator's handover times (s) for ``result``'s requests and images in API-server ``order``
    (:data:`labkit.serve.api_server.API_ORDERS`), each request costing the ``vllm_input`` stages per
    image recorded on ``result``'s machine (unscaled); None where that machine recorded no ``vllm_input``."""
    return _handover_times(_input_costs(result, root), result.params["requests"], order)


def _shape(times: list[float] | None) -> list:
    if not times:
        return [None] * 5
    last = max(times)
    return [min(times), sum(times) / len(times), last, min(times) / last, sum(times) / len(times) / last]


def handover_table(result, root=None):
    """One row per quantity: measured in the real server, and the simulator's API server in either order
    (from the same machine's ``vllm_input``) where that is recorded."""
    import pandas as pd

    cols = ["quantity", "measured", "simulator: media-first, client-paced", "media-first, all in at once",
            "one after another"]
    if result is None:
        return pd.DataFrame(columns=cols)
    s = result.params["summary"]
    n = s["requests"]
    measured = [s["handover_s"]["first"], s["handover_s"]["mean"], s["handover_s"]["last"],
                s["handover"]["first_frac"], s["handover"]["mean_frac"]]
    costs = _input_costs(result, root)
    paced = _shape(_handover_times(costs, n, "media-first", intake=True))
    media, fifo = (_shape(_handover_times(costs, n, order)) for order in ("media-first", "one-after-another"))
    names = ["first handover (s)", "mean handover (s)", "last handover (s)", "first / last", "mean / last"]
    rows = [("requests sent at once", n, n, n, n)] + [
        (q, m, c, a, b) for q, m, c, a, b in zip(names, measured, paced, media, fifo)]
    cpu = s.get("api_server_cpu_s")
    whole = fifo[0]  # one after another, the first handover is one request's whole input processing
    per = None
    if costs is not None and costs[2] is not None:
        per = whole + costs[2]["request_parse"] / 1e9  # the client's serialization runs in its own process
    rows.append(("API server CPU per request (s)", None if cpu is None else cpu / n, per, whole, whole))
    return pd.DataFrame(rows, columns=cols)


def plot_handovers(result, root=None) -> go.Figure:
    """Per request, in handover order: when its handler started, when it was handed over and when its
    first token came; the simulator's handovers in either order as lines."""
    title = "When the real vllm serve hands each request to its engine"
    if result is None:
        return no_result(NO_HANDOVER, title)
    p = result.params
    rows = sorted(result.rows, key=lambda r: r["order"])
    x = [r["order"] + 1 for r in rows]
    fig = go.Figure()
    for key, label, colour in _STAGES:
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in rows], mode="markers", name=label,
                                 marker=dict(color=colour, size=7)))
    costs = _input_costs(result, root)
    for order, intake, dash, what in (("media-first", True, "solid", "media-first, client-paced"),
                                      ("media-first", False, "dash", "media-first, all in at once"),
                                      ("one-after-another", False, "dot", "one after another")):
        assumed = _handover_times(costs, p["requests"], order, intake=intake)
        if assumed:
            fig.add_trace(go.Scatter(x=x, y=assumed, mode="lines", line=dict(color="#1f5fa8", dash=dash),
                                     name=f"simulator's API server, {what} (vllm_input's stages)"))
    fig.update_layout(title=f"{title} ({p['requests']} x {p['images_per_request']} images of {p['image_size']}, "
                            f"{result.slug}, measured)",
                      xaxis_title="request, in handover order", yaxis_title="s after the first request was sent",
                      height=420, legend=dict(orientation="h", y=-0.25))
    return fig
