"""Machines side by side: every recorded result under ``data/results/<machine>/``, nothing dropped silently.

More: docs/reference.md, ``labkit.viz.machines.compare``.
"""

from __future__ import annotations

import logging
import math

import pandas as pd
import plotly.graph_objects as go

from labkit.results import BenchResult, results_rows
from labkit.viz.labels import no_result, shorten
from labkit.viz.sources import source_rank, source_style, source_title

logger = logging.getLogger(__name__)

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
    "vllm_prefix_ranges": ("the next bubble", ("median_ns", "median_us")),
    "vllm_sched": ("the next bubble", ("median_ns",)),
    "vllm_": ("vLLM A/B", ("output_tok_s", "mean_tpot_ms", "median_us", "median_ns")),
}
FALLBACK_METRICS = ("median_us", "median_ns", "median_ms")
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
    return next((entry for prefix, entry in MAIN_METRICS.items()
                 if norm == prefix or (prefix.endswith("_") and norm.startswith(prefix))), None)


def section_of(name: str) -> str | None:
    """The lab section a result name belongs to, or None."""
    entry = _entry(name)
    return entry[0] if entry else None


def _candidates(name: str) -> tuple[str, ...]:
    entry = _entry(name)
    return entry[1] if entry else FALLBACK_METRICS


def main_metric(name: str, columns) -> str | None:
    """The column compared for result ``name``: first candidate present in ``columns``."""
    cols = set(columns)
    return next((c for c in _candidates(name) if c in cols), None)


def _label_columns(df: pd.DataFrame, metric: str) -> list[str]:
    """The swept parameters: label-like columns, fewest values first, while they still split a machine's rows."""
    cands = []
    for c in df.columns:
        if c in BOOKKEEPING or c == metric:
            continue
        vals = df[c].dropna()
        if len(vals) and all(isinstance(v, (str, bool, int)) for v in vals) and df[c].nunique(dropna=False) > 1:
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


#: shown in tables where a machine has the row but no value for the main metric
MISSING = "missing"
#: shown in tables where a machine has no such row (or no such result) at all
NO_RESULT = "no result"
COLUMNS = ["section", "result", "metric", "label", "machine", "source", "value", "missing"]
MISSING_COLUMNS = ["machine", "source", "section", "result", "rows", "missing_rows", "reason"]
MISSING_COLOUR = "#c0392b"
_FILL_WORDS = {"/": "hatched", ".": "dotted", "x": "crossed"}
#: longest line (characters) naming the sources under a figure's title
SOURCES_LINE_CHARS = 110


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def _missing_reason(row: pd.Series, name: str, metric: str) -> str:
    """Why ``row`` has no value for ``metric``, naming the metrics it has instead."""
    if row.get("source") == "interpreted":
        return f"no {metric}: interpreted run (correctness only, never timed)"
    others = [c for c in dict.fromkeys(_candidates(name) + FALLBACK_METRICS)
              if c != metric and _is_number(row.get(c))]
    return f"no {metric}" + (f" (has {', '.join(others)})" if others else "")


def _result_frame(results: list[BenchResult], name: str) -> pd.DataFrame:
    # one frame per result, of Python objects, so a parameter missing from some rows never
    # turns its integers into floats (``size_bytes=256``, not ``256.0``)
    rows = results_rows(r for r in results if r.name == name)
    return pd.DataFrame(rows, dtype=object).dropna(axis=1, how="all")


def comparison_table(results: list[BenchResult]) -> pd.DataFrame:
    """Tidy rows: ``section, result, metric, label, machine, source, value, missing`` (one per result row)."""
    if not results:
        return pd.DataFrame(columns=COLUMNS)
    out = []
    for name in sorted({r.name for r in results}):
        df = _result_frame(results, name)
        metric = main_metric(name, df.columns)
        if metric is None:
            logger.info("%s: none of %s recorded; listed as missing", name, ", ".join(_candidates(name)))
            continue
        values = pd.to_numeric(df[metric], errors="coerce")
        reasons = pd.Series([("" if pd.notna(v) else _missing_reason(row, name, metric))
                             for v, (_, row) in zip(values, df.iterrows())], index=df.index)
        variant = df["variant"].astype(str) if "variant" in df.columns else pd.Series("all", index=df.index)
        labels = variant.copy()
        for c in _label_columns(df, metric):
            labels = labels + (" | " + c + "=" + df[c].astype(str)).where(df[c].notna(), "")
        section = section_of(name) or "other"
        if labels.nunique() > MAX_LABELS:
            frame = pd.DataFrame({"v": variant, "machine": df["machine"], "source": df["source"],
                                  "value": values, "missing": reasons})
            for (v, machine, source), g in frame.groupby(["v", "machine", "source"], sort=True):
                present = g["value"].dropna()
                value = float(present.median()) if len(present) else math.nan
                why = "" if len(present) else g["missing"].iloc[0]
                out.append([section, name, metric, f"{v} (median over sweep)", machine, source, value, why])
            continue
        for idx, r in df.iterrows():
            out.append([section, name, metric, labels[idx], r["machine"], r["source"], float(values[idx]),
                        reasons[idx]])
    return pd.DataFrame(out, columns=COLUMNS)


def missing_table(results: list[BenchResult], machines: list[str] | None = None) -> pd.DataFrame:
    """What each machine lacks: ``machine, source, section, result, rows, missing_rows, reason``."""
    machines = machines if machines is not None else sorted({r.slug for r in results})
    out = []
    for name in sorted({r.name for r in results}):
        section = section_of(name) or "other"
        have = {r.slug for r in results if r.name == name}
        out += [[m, "", section, name, 0, 0, f"no {name} result"] for m in machines if m not in have]
        df = _result_frame(results, name)
        if df.empty:
            out += [[r.slug, r.source, section, name, 0, 0, "recorded without rows"]
                    for r in results if r.name == name]
            continue
        metric = main_metric(name, df.columns)
        if metric is None:
            why = f"no main metric (none of {', '.join(_candidates(name))})"
            out += [[m, s, section, name, len(g), len(g), why]
                    for (m, s), g in df.groupby(["machine", "source"], sort=True)]
            continue
        values = pd.to_numeric(df[metric], errors="coerce")
        for (m, s), g in df.groupby(["machine", "source"], sort=True):
            lacking = g[values[g.index].isna()]
            reasons = [_missing_reason(row, name, metric) for _, row in lacking.iterrows()]
            for why in dict.fromkeys(reasons):
                out.append([m, s, section, name, len(g), reasons.count(why), why])
    table = pd.DataFrame(out, columns=MISSING_COLUMNS)
    return table.sort_values(["machine", "result"], kind="stable").reset_index(drop=True)


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """``comparison_table`` as one row per (result, metric, label) with a source and a value column per machine."""
    if table.empty:
        return pd.DataFrame()
    machines = sorted(set(table["machine"]), key=lambda m: (
        min(source_rank(s) for s in table.loc[table["machine"] == m, "source"]), m))
    records = {}
    for key, g in table.groupby(["result", "metric", "label"], sort=False):
        rec = {}
        for m in machines:
            h = g[g["machine"] == m]
            if h.empty:
                rec[(m, "source")], rec[(m, "value")] = "", NO_RESULT
            else:
                v = h["value"].iloc[0]
                rec[(m, "source")], rec[(m, "value")] = h["source"].iloc[0], (MISSING if pd.isna(v) else float(v))
        records[key] = rec
    wide = pd.DataFrame.from_dict(records, orient="index")
    wide.index = pd.MultiIndex.from_tuples(wide.index, names=["result", "metric", "label"])
    wide.columns = pd.MultiIndex.from_tuples(wide.columns, names=["machine", ""])
    return wide


def _unit(metric: str) -> str:
    units = (("_ns", "ns"), ("_us", "us"), ("_ms", "ms"), ("_s", "s"), ("_bytes", "bytes"))
    return next((unit for suffix, unit in units if metric.endswith(suffix)), "")


def _styles(table: pd.DataFrame) -> dict[tuple[str, str], tuple[str, str]]:
    """(machine, source) -> (colour, pattern): one shade of the source's colour family per machine."""
    pairs = sorted(set(zip(table["machine"], table["source"])), key=lambda p: (source_rank(p[1]), p[0]))
    seen: dict[str, int] = {}
    out = {}
    for machine, source in pairs:
        out[(machine, source)] = source_style(source, seen.get(source, 0))
        seen[source] = seen.get(source, 0) + 1
    return out


def _sources_line(df: pd.DataFrame) -> str:
    by = df.groupby("source")["machine"].agg(lambda s: ", ".join(sorted(set(s))))
    parts = [f"{src}: {by[src]}" for src in sorted(by.index, key=source_rank)]
    mixed = " - mixed sources, compare with care" if len(by) > 1 else ""
    # the legend lists every machine; the title line stays within the figure's width
    return shorten(" · ".join(parts), SOURCES_LINE_CHARS - len(mixed)) + mixed


def _missing_note(df: pd.DataFrame, machines: list[str]) -> tuple[str, str]:
    """(short text, full hover text) naming what this result lacks, or ("", "")."""
    parts = []
    miss = df[df["value"].isna()]
    for (m, why), g in miss.groupby(["machine", "missing"], sort=True):
        parts.append(f"{m}: {why} in {len(g)} of {int((df['machine'] == m).sum())} rows")
    labels = set(df["label"])
    for m, g in df.groupby("machine", sort=True):
        lacking = len(labels - set(g["label"]))
        if lacking:
            parts.append(f"{m}: no row for {lacking} of {len(labels)} labels")
    absent = [m for m in machines if m not in set(df["machine"])]
    if absent:
        parts.append(f"no result on {', '.join(absent)}")
    if not parts:
        return "", ""
    full = "missing - " + "; ".join(parts)
    return shorten(full, 110), "<br>".join(parts)


def plot_comparison(table: pd.DataFrame) -> go.Figure:
    """Grouped bars per machine for one result at a time (a dropdown picks it); missing rows marked in red."""
    if table.empty:
        return no_result("no recorded results yet: run `make report` on a machine", "Machines side by side")
    styles = _styles(table)
    machines = sorted(set(table["machine"]))
    fig = go.Figure()
    groups = []
    for name, df in table.groupby("result", sort=True):
        metric = df["metric"].iloc[0]
        unit = _unit(metric)
        idx = []
        for (machine, source), d in df.groupby(["machine", "source"], sort=True):
            colour, pattern = styles[(machine, source)]
            fig.add_bar(
                x=list(d["label"]), y=[None if pd.isna(v) else float(v) for v in d["value"]],
                name=f"{machine} ({source})", visible=not groups, offsetgroup=f"{machine} ({source})",
                legendgroup=source, legendgrouptitle_text=source_title(source),
                legendrank=100 * source_rank(source) + machines.index(machine),
                marker=dict(color=colour, pattern=dict(shape=pattern, solidity=0.35) if pattern else None),
                hovertemplate=f"%{{x}}<br>%{{y:.4g}} {unit}<extra>{machine} ({source})</extra>",
            )
            idx.append(len(fig.data) - 1)
        for (machine, source), g in df[df["value"].isna()].groupby(["machine", "source"], sort=True):
            # one marker per label where this machine's bar is missing, in that bar's slot
            fig.add_scatter(
                x=list(g["label"]), y=[0.02] * len(g), yaxis="y2", mode="markers+text",
                name=f"{machine} ({source}): missing", visible=not groups, offsetgroup=f"{machine} ({source})",
                legendgroup="missing", legendgrouptitle_text="recorded without a value", legendrank=1000,
                marker=dict(symbol="x-thin-open", size=12, color=MISSING_COLOUR,
                            line=dict(width=2, color=MISSING_COLOUR)),
                text=["missing"] * len(g), textposition="top center", textfont=dict(size=9, color=MISSING_COLOUR),
                hovertext=[f"{machine} ({source}): {w}" for w in g["missing"]], hoverinfo="text",
            )
            idx.append(len(fig.data) - 1)
        values = df["value"].dropna()
        spread = values.max() / values.min() if len(values) and values.min() > 0 else 1.0
        note, note_full = _missing_note(df, machines)
        # always one note (hidden when nothing is missing), so switching results replaces it
        annotations = [dict(text=note or " ", hovertext=note_full or None, visible=bool(note), name="missing-note",
                            xref="paper", yref="paper", x=0, y=1, xanchor="left", yanchor="bottom", yshift=4,
                            showarrow=False, font=dict(size=11, color=MISSING_COLOUR))]
        fills = [f"{_FILL_WORDS.get(source_style(s)[1], 'patterned')}: {s}"
                 for s in sorted(set(df["source"]), key=source_rank) if source_style(s)[1]]
        xtitle = "variant | swept parameters" + (f" ({'; '.join(fills)})" if fills else "")
        groups.append((name, idx, {
            "title.text": f"{name}: {metric} by machine<br><sup>{_sources_line(df)}</sup>",
            "yaxis.title.text": f"{metric} ({unit})" if unit else metric,
            "yaxis.type": "log" if spread > 30 and not math.isinf(spread) else "linear",
            "xaxis.title.text": xtitle,
            "annotations": annotations,
        }))
    n = len(fig.data)
    buttons = [dict(label=name, method="update", args=[{"visible": [i in idx for i in range(n)]}, lay])
               for name, idx, lay in groups]
    first = groups[0][2]
    fig.update_layout(
        title=first["title.text"], yaxis_title=first["yaxis.title.text"], yaxis_type=first["yaxis.type"],
        xaxis_title=first["xaxis.title.text"], annotations=first["annotations"],
        yaxis2=dict(overlaying="y", range=[0, 1], visible=False, fixedrange=True),
        barmode="group", scattermode="group", showlegend=True, height=520,
        legend=dict(title_text="machine (source)", groupclick="toggleitem"),
        updatemenus=[dict(buttons=buttons, direction="down", x=1.0, xanchor="right", y=1.22, yanchor="bottom")],
        margin=dict(t=130),
    )
    return fig
