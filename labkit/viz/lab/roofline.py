"""The attention kernel's runs on a roofline of their GPU.

More: docs/reference.md, ``labkit.viz.lab.roofline``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import plotly.graph_objects as go

from labkit.viz.labels import legend_below
from labkit.facts import GpuPeak, peak_for

#: the variants drawn: the lab's kernel and FlexAttention (SDPA's masked run is far below both)
SHOWN_VARIANTS = ("triton_prefix", "flex_attention")
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_SYMBOLS = ("circle", "diamond", "square", "triangle-up", "star", "x")
_COLOURS = {"triton_prefix": "#1f5fa8", "flex_attention": "#d9730d"}
#: shape fields an attn_bench row records, checked against the case definition
_SHAPE_FIELDS = ("total_q", "total_kv", "num_heads", "num_kv_heads", "head_dim", "sliding_window", "flops")


@dataclass(frozen=True)
class AttnTraffic:
    """What one attention case does and moves: FLOPs, bytes, the pairs and keys they come from."""

    flops: int
    bytes: int
    allowed_pairs: int
    needed_keys: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte."""
        return self.flops / self.bytes


def needed_keys(q_len: int, kv_len: int, ranges=(), sliding_window: int = 0) -> int:
    """How many of a row's ``kv_len`` keys some of its ``q_len`` queries (the last positions) may attend to."""
    if not 0 < q_len <= kv_len:
        raise ValueError(f"need 0 < q_len <= kv_len, got q_len={q_len}, kv_len={kv_len}")
    q0, last = kv_len - q_len, kv_len - 1
    spans = [(max(0, q0 - sliding_window + 1) if sliding_window > 0 else 0, last)]
    spans += [(max(0, s), min(e, last)) for s, e in ranges if s < e and s <= last and e >= q0]
    count, end = 0, -1
    for s, e in sorted(spans):
        if e > end:
            count += e - max(s, end + 1) + 1
            end = e
    return count


def attention_traffic(seq_lens, ranges_per_row, *, num_heads: int, num_kv_heads: int, head_dim: int,
                      sliding_window: int = 0, element_bytes: int = 2) -> AttnTraffic:
    """FLOPs and bytes of one packed attention launch under the module's counting rule."""
    from labkit.attn.prefix_mask import count_allowed_pairs

    rows = list(zip(seq_lens, ranges_per_row))
    pairs = sum(count_allowed_pairs(q, kv, list(r), sliding_window) for (q, kv), r in rows)
    keys = sum(needed_keys(q, kv, r, sliding_window) for (q, kv), r in rows)
    total_q = sum(q for q, _ in seq_lens)
    q_and_out = 2 * total_q * num_heads * head_dim * element_bytes
    k_and_v = 2 * keys * num_kv_heads * head_dim * element_bytes
    return AttnTraffic(flops=4 * head_dim * num_heads * pairs, bytes=q_and_out + k_and_v,
                       allowed_pairs=pairs, needed_keys=keys)


def case_traffic(case, dtype: str = "bfloat16") -> AttnTraffic:
    """:func:`attention_traffic` of an :class:`labkit.attn.bench_attn.AttnCase`."""
    return attention_traffic(case.seq_lens, case.ranges, num_heads=case.num_heads, num_kv_heads=case.num_kv_heads,
                             head_dim=case.head_dim, sliding_window=case.sliding_window,
                             element_bytes=ELEMENT_BYTES[dtype])


@dataclass
class Roofline:
    """Points on rooflines: ``points`` (one dict per timed run), ``peaks`` (GPU name -> its peak),
    ``skipped`` (one line per run that could not be placed, and why)."""

    points: list[dict] = field(default_factory=list)
    peaks: dict[str, GpuPeak] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def point(row: dict, traffic: AttnTraffic, peak: GpuPeak) -> dict:
    """One run on the roof: ``row`` (an ``attn_bench`` row with ``median_ns``) with its traffic and GPU peak.

    Columns: ``case``, ``variant``, ``flops``, ``bytes``, ``flop_per_byte``, ``median_ms``,
    ``tflops`` and ``tb_s`` (achieved), ``bound`` (``memory`` left of the ridge, else
    ``compute``), ``roof_tflops`` (attainable here), ``pct_of_roof``, ``pct_of_peak_tflops``,
    ``pct_of_peak_tb_s``, and the GPU's ``peak_tflops``, ``peak_tb_s``, ``ridge_flop_per_byte``.
    """
    seconds = float(row["median_ns"]) * 1e-9
    tflops = traffic.flops / seconds / 1e12
    tb_s = traffic.bytes / seconds / 1e12
    intensity = traffic.intensity
    roof = peak.attainable_tflops(intensity)
    return {
        "machine": row.get("machine"), "gpu_name": row.get("gpu_name"), "gpu": peak.name,
        "case": row["case"], "variant": row["variant"], "flops": traffic.flops, "bytes": traffic.bytes,
        "flop_per_byte": intensity, "median_ms": seconds * 1e3, "tflops": tflops, "tb_s": tb_s,
        "bound": "memory" if intensity < peak.ridge_flop_per_byte else "compute", "roof_tflops": roof,
        "pct_of_roof": 100 * tflops / roof, "pct_of_peak_tflops": 100 * tflops / peak.bf16_dense_tflops,
        "pct_of_peak_tb_s": 100 * tb_s / peak.mem_tb_s, "peak_tflops": peak.bf16_dense_tflops,
        "peak_tb_s": peak.mem_tb_s, "ridge_flop_per_byte": peak.ridge_flop_per_byte,
    }


def roofline_points(rows: list[dict], *, variants=SHOWN_VARIANTS, cases=None) -> Roofline:
    """Place timed ``attn_bench`` rows (``results_rows`` adds ``machine`` and ``gpu_name``) on their GPU's roof.

    Each row's shapes are taken from its case definition (``cases``, default the benchmark's
    :data:`labkit.attn.bench_attn.CASES`) and must match what the row recorded, FLOPs
    included; rows of other variants, untimed rows and rows that do not match are left out
    (the last with a line in ``skipped``), as are GPUs missing from the peak table.
    """
    if cases is None:
        from labkit.attn.bench_attn import CASES as cases
    out = Roofline()
    for row in rows:
        if row.get("variant") not in variants or "median_ns" not in row:
            continue
        label = f"{row.get('machine')} {row.get('case')} {row.get('variant')}"
        peak = peak_for(row.get("gpu_name"))
        if peak is None:
            out.skipped.append(f"{label}: no peak figures for GPU {row.get('gpu_name')!r} in the table")
            continue
        case = cases.get(row.get("case"))
        if case is None:
            out.skipped.append(f"{label}: case not defined any more")
            continue
        traffic = case_traffic(case, str(row.get("dtype") or "bfloat16"))
        defined = {"total_q": case.total_q, "total_kv": sum(kv for _, kv in case.seq_lens),
                   "num_heads": case.num_heads, "num_kv_heads": case.num_kv_heads, "head_dim": case.head_dim,
                   "sliding_window": case.sliding_window, "flops": traffic.flops}
        differ = [k for k in _SHAPE_FIELDS if k in row and row[k] != defined[k]]
        if differ:
            out.skipped.append(f"{label}: recorded shapes differ from the case's ({', '.join(differ)})")
            continue
        out.peaks[str(row.get("gpu_name"))] = peak
        out.points.append(point(row, traffic, peak))
    return out


def describe(roof: Roofline) -> str:
    """The peaks (with their source) and, per run, its intensity, bound and shares, one line each."""
    if not roof.points:
        return "\n".join(["No GPU run to place on a roofline: run `labkit bench attn` on a GPU.", *roof.skipped])
    lines = []
    for gpu_name, peak in roof.peaks.items():
        lines.append(f"{gpu_name} ({peak.name}): {peak.bf16_dense_tflops:g} TFLOP/s dense bf16, "
                     f"{peak.mem_tb_s:g} TB/s, ridge {peak.ridge_flop_per_byte:.0f} FLOP/byte. Source: {peak.source}")
        for p in (p for p in roof.points if p["gpu_name"] == gpu_name):
            share = (f"{p['tb_s']:.2f} TB/s = {p['pct_of_peak_tb_s']:.0f}% of peak bandwidth" if p["bound"] == "memory"
                     else f"{p['tflops']:.0f} TFLOP/s = {p['pct_of_peak_tflops']:.0f}% of peak compute")
            lines.append(f"  {p['case']}, {p['variant']}: {p['flop_per_byte']:.1f} FLOP/byte, {p['bound']}-bound; "
                         f"{share}; {p['pct_of_roof']:.0f}% of the roof")
    return "\n".join(lines + [f"left out: {s}" for s in roof.skipped])


def roofline_table(roof: Roofline):
    """The points as a DataFrame (units in the column names; shares in percent)."""
    import pandas as pd

    cols = ["machine", "case", "variant", "median_ms", "flops", "bytes", "flop_per_byte", "bound", "tflops",
            "pct_of_peak_tflops", "tb_s", "pct_of_peak_tb_s", "pct_of_roof"]
    return pd.DataFrame(roof.points).reindex(columns=cols)


def _roof_xs(points: list[dict], peak: GpuPeak) -> tuple[float, float]:
    """The log10 x range: every point and the ridge, with a margin."""
    xs = [p["flop_per_byte"] for p in points] + [peak.ridge_flop_per_byte]
    return math.log10(min(xs)) - 0.6, math.log10(max(xs)) + 0.6


def plot_roofline(roof: Roofline, *, title: str | None = None, source: str = "measured-gpu") -> go.Figure:
    """Log-log roofline per GPU (a dropdown where there are several): the roof, the ridge, one
    marker per run (colour: variant, symbol: case; label: share of the roof)."""
    fig = go.Figure()
    gpus = list(roof.peaks)
    if not roof.points:
        fig.add_annotation(text="no GPU run recorded yet (labkit bench attn on a GPU)", xref="paper", yref="paper",
                           x=0.5, y=0.5, showarrow=False)
        fig.update_layout(title=title or "roofline: no GPU result")
        return fig
    cases = list(dict.fromkeys(p["case"] for p in roof.points))
    groups: list[str] = []  # the GPU of each trace, for the dropdown
    for gpu_name in gpus:
        peak = roof.peaks[gpu_name]
        mine = [p for p in roof.points if p["gpu_name"] == gpu_name]
        lo, hi = _roof_xs(mine, peak)
        n = 60
        xs = [10 ** (lo + (hi - lo) * i / (n - 1)) for i in range(n)] + [peak.ridge_flop_per_byte]
        xs.sort()
        visible = gpu_name == gpus[0]
        fig.add_scatter(x=xs, y=[peak.attainable_tflops(x) for x in xs], mode="lines", name=f"roof: {peak.name}",
                        line=dict(color="#333", width=2), visible=visible,
                        hovertemplate="%{x:.1f} FLOP/byte: at most %{y:.0f} TFLOP/s<extra>" + peak.name + "</extra>")
        fig.add_scatter(x=[peak.ridge_flop_per_byte] * 2, y=[peak.bf16_dense_tflops / 1e3, peak.bf16_dense_tflops],
                        mode="lines", name=f"ridge {peak.ridge_flop_per_byte:.0f} FLOP/byte",
                        line=dict(color="#999", dash="dot"), visible=visible, hoverinfo="skip")
        groups += [gpu_name, gpu_name]
        for variant in dict.fromkeys(p["variant"] for p in mine):
            pts = [p for p in mine if p["variant"] == variant]
            fig.add_scatter(
                x=[p["flop_per_byte"] for p in pts], y=[p["tflops"] for p in pts], mode="markers+text",
                name=variant, visible=visible, text=[f"{p['case']} {p['pct_of_roof']:.0f}%" for p in pts],
                textposition="bottom center" if variant == "flex_attention" else "top center", textfont=dict(size=10),
                marker=dict(size=11, color=_COLOURS.get(variant, "#555"),
                            symbol=[_SYMBOLS[cases.index(p["case"]) % len(_SYMBOLS)] for p in pts]),
                customdata=[[p["case"], p["median_ms"], p["tb_s"], p["pct_of_roof"], p["bound"],
                             p["pct_of_peak_tflops"], p["pct_of_peak_tb_s"]] for p in pts],
                hovertemplate=("%{customdata[0]}: %{customdata[1]:.3f} ms, %{y:.1f} TFLOP/s "
                               "(%{customdata[5]:.0f}% of peak), %{customdata[2]:.2f} TB/s (%{customdata[6]:.0f}% of peak), "
                               "%{x:.1f} FLOP/byte, %{customdata[4]}-bound, %{customdata[3]:.0f}% of the roof"
                               "<extra>" + variant + "</extra>"))
            groups.append(gpu_name)
    lo = min(_roof_xs([p for p in roof.points if p["gpu_name"] == g], roof.peaks[g])[0] for g in gpus)
    hi = max(_roof_xs([p for p in roof.points if p["gpu_name"] == g], roof.peaks[g])[1] for g in gpus)
    fig.update_layout(
        title=title or f"prefix-LM attention on the roofline of {gpus[0]} ({source}; bf16)",
        xaxis=dict(type="log", title="arithmetic intensity (FLOP / byte moved, lower bound on bytes)", range=[lo, hi]),
        yaxis=dict(type="log", title="TFLOP/s (allowed pairs only)"),
        height=520, plot_bgcolor="white",
    )
    legend_below(fig)
    fig.update_xaxes(gridcolor="#eee")
    fig.update_yaxes(gridcolor="#eee")
    peaks = "; ".join(f"{p.name}: {p.bf16_dense_tflops:g} TFLOP/s dense bf16, {p.mem_tb_s:g} TB/s"
                      for p in roof.peaks.values())
    fig.add_annotation(text=f"peaks: {peaks} (datasheets; hover for the sources)",
                       hovertext="<br>".join(p.source for p in roof.peaks.values()), xref="paper", yref="paper",
                       x=0, y=1, xanchor="left", yanchor="bottom", showarrow=False, font=dict(size=10, color="#555"))
    if len(gpus) > 1:
        fig.update_layout(updatemenus=[dict(x=1, y=1.12, xanchor="right", buttons=[
            dict(label=g, method="update", args=[{"visible": [t == g for t in groups]},
                                                 {"title.text": f"prefix-LM attention on the roofline of {g}"}])
            for g in gpus])])
    return fig
