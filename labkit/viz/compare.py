"""Machines side by side: every recorded result under ``data/results/<machine>/``.

The comparison is generic. Results are grouped by result name, a row label and machine;
each result name gets one main metric from ``MAIN_METRICS`` (first candidate column
present in its rows; names matching no entry use ``FALLBACK_METRICS``; results with none
of them are skipped). A row's label is its ``variant`` plus the swept parameters: among
the columns holding strings, integers or booleans (floats are measurements; see
``BOOKKEEPING`` for columns never used), the fewest needed to tell rows apart.
Missing results are listed as such, never errors.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from labkit.results import BenchResult, results_table

#: result-name prefix -> (section of the lab, main-metric candidates in order of preference)
MAIN_METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "calibration": ("calibration", ("median_ns",)),
    "mm_": ("#40143 placeholder scheduler", ("median_us", "median_ns", "step_us", "output_tok_s")),
    "h2d_": ("#38794 H2D prefix ranges", ("median_us", "median_ns", "step_median_ns", "idle_us_per_step")),
    "ranges_": ("#38794 H2D prefix ranges", ("median_us", "median_ns", "host_us")),
    "attn_": ("Triton prefix-attention kernel", ("tflops", "median_us", "median_ns")),
    "engine": ("engine and bubbles", ("tokens_per_s_median", "tokens_per_s", "median_ns")),
    "engine_": ("engine and bubbles", ("tokens_per_s_median", "tokens_per_s", "output_tok_s", "median_ns")),
    "trace_": ("trace analyzer", ("median_s", "seconds", "median_ms", "median_us", "median_ns")),
    "vllm_": ("vLLM A/B", ("output_tok_s", "mean_tpot_ms", "median_us", "median_ns")),
}
FALLBACK_METRICS = ("median_us", "median_ns", "median_ms")
#: the sections every machine is expected to have a result for
SECTIONS = tuple(dict.fromkeys(section for section, _ in MAIN_METRICS.values()))
#: columns never used as labels
BOOKKEEPING = frozenset({
    "machine", "gpu_name", "source", "result", "created", "variant", "repeats", "number", "warmup",
    "method", "metric_unit",
})
#: label-like columns that usually follow from the parameters
DERIVED_SUFFIXES = ("_count", "_per_step")
#: at most this many labels per result before rows are summarised per variant
MAX_LABELS = 24


def _entry(name: str) -> tuple[str, tuple[str, ...]] | None:
    """The ``MAIN_METRICS`` entry for a result name (``-`` counts as ``_``)."""
    norm = name.replace("-", "_").removesuffix("_quick")
    for prefix, entry in MAIN_METRICS.items():
        if norm == prefix or (prefix.endswith("_") and norm.startswith(prefix)):
            return entry
    return None


def section_of(name: str) -> str | None:
    """The lab section a result name belongs to, or None."""
    entry = _entry(name)
    return entry[0] if entry else None


def main_metric(name: str, columns) -> str | None:
    """The column compared for result ``name``: first candidate present in ``columns``."""
    cols = set(columns)
    entry = _entry(name)
    candidates = entry[1] if entry else FALLBACK_METRICS
    return next((c for c in candidates if c in cols), None)


def _is_label_value(v) -> bool:
    return isinstance(v, (str, bool, int)) and not isinstance(v, float)


def _label_columns(df: pd.DataFrame, metric: str) -> list[str]:
    """The swept parameters: label-like columns added, fewest distinct values first, only
    while they still split rows that share a label on one machine (derived counts, which
    follow from the parameters, are then never needed)."""
    cands = []
    for c in df.columns:
        if c in BOOKKEEPING or c == metric:
            continue
        vals = df[c].dropna()
        if len(vals) == len(df) and all(_is_label_value(v) for v in vals) and vals.nunique() > 1:
            cands.append(c)
    # counts derived from the parameters (``*_count``, ``*_per_step``) lose ties to parameters
    cands.sort(key=lambda c: (df[c].nunique(), c.endswith(DERIVED_SUFFIXES), c))
    keys = ["machine"] + (["variant"] if "variant" in df.columns else [])
    chosen: list[str] = []
    for c in cands:
        if not df.duplicated(subset=keys + chosen).any():
            break
        if df[keys + chosen + [c]].drop_duplicates().shape[0] > df[keys + chosen].drop_duplicates().shape[0]:
            chosen.append(c)
    return chosen


def comparison_table(results: list[BenchResult]) -> pd.DataFrame:
    """Tidy rows: ``section, result, metric, label, machine, source, value`` (one per result row).

    Results without a usable metric are skipped. When a result has more than
    ``MAX_LABELS`` labels, each variant's value is the median over its rows
    (label ``"<variant> (median over sweep)"``).
    """
    columns = ["section", "result", "metric", "label", "machine", "source", "value"]
    if not results:
        return pd.DataFrame(columns=columns)
    out = []
    for name in sorted({r.name for r in results}):
        # one frame per result, so other results' columns never turn integers into floats
        df = results_table([r for r in results if r.name == name]).dropna(axis=1, how="all")
        metric = main_metric(name, df.columns)
        if metric is None:
            continue
        df = df[pd.to_numeric(df[metric], errors="coerce").notna()]
        if df.empty:
            continue
        variant = df["variant"].astype(str) if "variant" in df.columns else pd.Series("all", index=df.index)
        label_cols = _label_columns(df, metric)
        labels = variant.copy()
        for c in label_cols:
            labels = labels + " | " + c + "=" + df[c].astype(str)
        section = section_of(name) or "other"
        if labels.nunique() > MAX_LABELS:
            grouped = df.assign(_v=variant).groupby(["_v", "machine", "source"])[metric].median().reset_index()
            for _, r in grouped.iterrows():
                out.append([section, name, metric, f"{r['_v']} (median over sweep)", r["machine"], r["source"],
                            float(r[metric])])
            continue
        for idx, r in df.iterrows():
            out.append([section, name, metric, labels[idx], r["machine"], r["source"], float(r[metric])])
    return pd.DataFrame(out, columns=columns)


def coverage(results: list[BenchResult], machines: list[str] | None = None) -> pd.DataFrame:
    """Machines x sections: how many results each machine has per section (0 = none)."""
    machines = machines if machines is not None else sorted({r.slug for r in results})
    counts = {m: {s: 0 for s in SECTIONS} for m in machines}
    for r in results:
        s = section_of(r.name)
        if s is not None and r.slug in counts:
            counts[r.slug][s] += 1
    return pd.DataFrame(counts).T.reindex(columns=list(SECTIONS)).rename_axis("machine")


def missing_messages(results: list[BenchResult]) -> list[str]:
    """One line per (section, machine) without a result: ``no result for X on Y``."""
    cov = coverage(results)
    return [
        f"no result for {section} on {machine}"
        for machine, row in cov.iterrows() for section, n in row.items() if n == 0
    ]


def _unit(metric: str) -> str:
    for suffix, unit in (("_ns", "ns"), ("_us", "us"), ("_ms", "ms"), ("_s", "s"), ("_bytes", "bytes")):
        if metric.endswith(suffix):
            return unit
    return ""


def plot_comparison(table: pd.DataFrame) -> go.Figure:
    """Grouped bars per machine for one result at a time; a dropdown picks the result.

    Simulated and interpreted numbers are marked in the legend (machine (source)).
    """
    if table.empty:
        fig = go.Figure()
        fig.add_annotation(text="no recorded results yet: run `make report` on a machine", showarrow=False,
                           x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(title="Machines side by side", xaxis_visible=False, yaxis_visible=False, height=260)
        return fig
    fig = go.Figure()
    groups: list[tuple[str, str, list[int]]] = []
    for name, df in table.groupby("result", sort=True):
        metric = df["metric"].iloc[0]
        idx = []
        for (machine, source), d in df.groupby(["machine", "source"], sort=True):
            fig.add_bar(
                x=list(d["label"]), y=list(d["value"]), name=f"{machine} ({source})", visible=not groups,
                hovertemplate="%{x}<br>%{y:.4g}<extra>%{fullData.name}</extra>",
            )
            idx.append(len(fig.data) - 1)
        groups.append((name, metric, idx))
    n = len(fig.data)
    buttons = []
    for name, metric, idx in groups:
        values = table.loc[table["result"] == name, "value"]
        spread = values.max() / values.min() if (values > 0).all() and values.min() > 0 else 1.0
        buttons.append(dict(
            label=name, method="update",
            args=[{"visible": [i in idx for i in range(n)]},
                  {"title.text": f"{name}: {metric} by machine",
                   "yaxis.title.text": f"{metric} ({_unit(metric)})" if _unit(metric) else metric,
                   "yaxis.type": "log" if spread > 30 and not math.isinf(spread) else "linear"}],
        ))
    first = buttons[0]["args"][1]
    fig.update_layout(
        title=first["title.text"], yaxis_title=first["yaxis.title.text"], yaxis_type=first["yaxis.type"],
        barmode="group", legend_title="machine (source)", height=480,
        updatemenus=[dict(buttons=buttons, direction="down", x=0.0, xanchor="left", y=1.18, yanchor="top")],
        margin=dict(t=110),
    )
    return fig
