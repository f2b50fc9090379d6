"""Notebook 08's "when the real server hands each request to the engine": the recorded ``vllm_handover``.

``labkit bench vllm-handover`` (:mod:`labkit.vllm.server.handover`) timed, in a real ``vllm serve``,
when each request's handler started, when its inputs were handed to the engine core and when
its first token reached the client. Here they are set beside what the serving simulator's API
server assumes (:mod:`labkit.serve.api_server`: one thread preparing the requests one after
another from t = 0, each costing the ``vllm_input`` stages the simulator reads, per image,
recorded on the same machine).

- :func:`recorded_handovers`: every machine's recorded result, this machine's first;
- :func:`assumed_handovers`: the simulator's handover times for the run's shape, from that machine's ``vllm_input``;
- :func:`handover_table`: the summary beside the assumption;
- :func:`plot_handovers`: per request (in handover order) its stages' times, and the assumption as a line.
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


def assumed_handovers(result, root=None) -> list[float] | None:
    """The simulator's handover times (s) for ``result``'s requests and images, each request costing the
    ``vllm_input`` stages per image recorded on ``result``'s machine, one after another from t = 0; None
    where that machine recorded no ``vllm_input``."""
    from labkit.results import load_results
    from labkit.serve.inputs import per_image_input_ns

    found = [r for r in load_results(root, name="vllm_input") if r.slug == result.slug]
    if not found:
        return None
    per_image_ns, _ = per_image_input_ns({"rows": found[0].rows})
    per_request_s = per_image_ns * result.params["images_per_request"] / 1e9
    return [(i + 1) * per_request_s for i in range(result.params["requests"])]


def handover_table(result, root=None):
    """One row per quantity: measured in the real server, and the simulator's assumption where it has one."""
    import pandas as pd

    if result is None:
        return pd.DataFrame(columns=["quantity", "measured", "simulator assumes"])
    s = result.params["summary"]
    assumed = assumed_handovers(result, root)
    n = s["requests"]
    rows = [("requests sent at once", n, n),
            ("first handover (s)", s["handover_s"]["first"], assumed[0] if assumed else None),
            ("mean handover (s)", s["handover_s"]["mean"], sum(assumed) / n if assumed else None),
            ("last handover (s)", s["handover_s"]["last"], assumed[-1] if assumed else None),
            ("first / last", s["handover"]["first_frac"], s["one_after_another"]["first_frac"]),
            ("mean / last", s["handover"]["mean_frac"], s["one_after_another"]["mean_frac"]),
            ("API server CPU per request (s)", None if s.get("api_server_cpu_s") is None else s["api_server_cpu_s"] / n,
             assumed[0] if assumed else None)]
    return pd.DataFrame(rows, columns=["quantity", "measured", "simulator assumes"])


def plot_handovers(result, root=None) -> go.Figure:
    """Per request, in handover order: when its handler started, when it was handed over and when its
    first token came; the simulator's assumed handovers as a dashed line."""
    title = "When the real vllm serve hands each request to its engine"
    if result is None:
        return no_result(NO_HANDOVER, title)
    rows = sorted(result.rows, key=lambda r: r["order"])
    x = [r["order"] + 1 for r in rows]
    fig = go.Figure()
    for key, label, colour in _STAGES:
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in rows], mode="markers", name=label,
                                 marker=dict(color=colour, size=7)))
    assumed = assumed_handovers(result, root)
    if assumed:
        fig.add_trace(go.Scatter(x=x, y=assumed, mode="lines", name="simulator's API server (one after another, "
                                 "vllm_input's stages)", line=dict(color="#1f5fa8", dash="dash")))
    p = result.params
    fig.update_layout(title=f"{title} ({p['requests']} x {p['images_per_request']} images of {p['image_size']}, "
                            f"{result.slug}, measured)",
                      xaxis_title="request, in handover order", yaxis_title="s after the first request was sent",
                      height=420, legend=dict(orientation="h", y=-0.25))
    return fig
