"""The recorded results as an appendix: a machines x results matrix, and each result's numbers behind a click."""

from __future__ import annotations

import dataclasses
import html

from labkit.results import base_name, find_all
from labkit.viz.sources import source_rank
from labkit.bench import format_table, sig3


def _machines(results) -> list[str]:
    return sorted({r.slug for r in results},
                  key=lambda m: (min(source_rank(r.source) for r in results if r.slug == m), m))


def one_per_machine(results) -> list:
    """Each machine's run of each result under the result's base name: its full run where it has one,
    else its quick one (a machine's quick and full runs are one result, not two)."""
    results = list(results)
    kept = [dataclasses.replace(r, name=name) for name in {base_name(r.name) for r in results}
            for r in find_all(name, results=results, here_first=False)]
    return sorted(kept, key=lambda r: (r.slug, r.name))


def results_matrix(results):
    """A :class:`labkit.bench.Table`: per result name, per machine ``N rows`` where it recorded it, else empty."""
    machines = _machines(results)
    by: dict[str, dict[str, str]] = {}
    for r in one_per_machine(results):
        notes = [n for n in ("quick" if r.size == "quick" else "", "" if r.source.startswith("measured") else r.source) if n]
        by.setdefault(r.name, {})[r.slug] = ", ".join([f"{len(r.rows)} rows", *notes])
    rows = [{"result": name, **{m: cells.get(m, "") for m in machines}} for name, cells in sorted(by.items())]
    return format_table(rows, max_rows=len(rows) or 1)


def missing_metrics(results):
    """``labkit.viz.machines.compare.missing_table`` without the results a machine has no file for (the
    matrix's empty cells say those): only results and rows recorded without their metric."""
    from labkit.viz.machines.compare import missing_table

    table = missing_table(results)
    if table.empty:
        return format_table([])
    absent = table["reason"] == "no " + table["result"] + " result"
    return format_table(table[~absent], columns=["machine", "source", "result", "rows", "missing_rows", "reason"])


def side_by_side_html(table) -> str:
    """Each result of ``table`` (``labkit.viz.machines.compare.comparison_table``) folded in a ``<details>``:
    its rows (label, metric) with one ``value (source)`` column per machine that recorded it."""
    if table is None or table.empty:
        return "<p>no result recorded yet</p>"
    parts = []
    for result, g in table.groupby("result", sort=True):
        machines = list(dict.fromkeys(g["machine"]))
        rows = []
        for (label, metric), h in g.groupby(["label", "metric"], sort=False):
            rec = {"label": label, "metric": metric}
            for m in machines:
                hit = h[h["machine"] == m]
                if not hit.empty:
                    v = hit["value"].iloc[0]
                    rec[m] = ("missing" if v != v else sig3(float(v))) + f" ({hit['source'].iloc[0]})"
            rows.append(rec)
        body = format_table(rows, max_rows=len(rows))._repr_html_()
        parts.append(f"<details><summary><code>{html.escape(str(result))}</code>: {len(rows)} rows on "
                     f"{html.escape(', '.join(machines))}</summary>{body}</details>")
    return "".join(parts)
