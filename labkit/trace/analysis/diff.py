"""Two traces compared: ``diff_analyses(before, after)`` gives tables with ``*_before``, ``*_after``, ``*_delta``."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from labkit.trace.analysis.trace import Trace, _clean, _records

CAUSES = ("idle_host_wait_us", "idle_kernel_wait_us", "idle_other_us")
#: the rows of ``TraceDiff.totals``: ``summary()`` totals, and the host stall of the H2D copies
TOTALS = ("busy_us", "idle_us", *CAUSES, "device_ops_count", "bubbles_count", "h2d_count", "pageable_h2d_count",
          "h2d_host_stall_us", "host_busy_us")


@dataclass
class TraceDiff:
    """Before/after tables; every numeric column comes as ``_before``, ``_after``, ``_delta``."""

    before: Trace
    after: Trace
    totals: pd.DataFrame  # metric, before, after, delta, ratio
    streams: pd.DataFrame
    call_sites: pd.DataFrame
    copies: pd.DataFrame
    kernels: pd.DataFrame

    def to_json(self, top: int = 20) -> dict:
        return _clean({
            "before": self.before.source(),
            "after": self.after.source(),
            "totals": _records(self.totals),
            "streams": _records(self.streams),
            "call_sites": _records(self.call_sites.head(top)),
            "copies": _records(self.copies),
            "kernels": _records(self.kernels.head(top)),
        })

    def summary_lines(self, top: int = 5) -> list[str]:
        out = [f"before: {self.before.source()['file']}   after: {self.after.source()['file']}",
               f"{'metric':<24} {'before':>14} {'after':>14} {'delta':>14} {'after/before':>12}"]
        for r in self.totals.itertuples():
            ratio = "" if pd.isna(r.ratio) else f"{r.ratio:.3f}"
            out.append(f"{r.metric:<24} {r.before:>14.3f} {r.after:>14.3f} {r.delta:>14.3f} {ratio:>12}")
        if len(self.call_sites):
            out.append(f"largest changes in host-wait idle by call site (top {top}, us):")
            for r in self.call_sites.head(top).itertuples():
                out.append(f"  {r.idle_overlap_us_delta:>+12.1f}  {r.call_site[:100]}")
        return out


def _merge(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    a = a[keys + values].groupby(keys, as_index=False, dropna=False).sum() if len(a) else pd.DataFrame(columns=keys + values)
    b = b[keys + values].groupby(keys, as_index=False, dropna=False).sum() if len(b) else pd.DataFrame(columns=keys + values)
    m = a.merge(b, on=keys, how="outer", suffixes=("_before", "_after"))
    for v in values:
        m[f"{v}_before"] = pd.to_numeric(m[f"{v}_before"], errors="coerce").fillna(0)
        m[f"{v}_after"] = pd.to_numeric(m[f"{v}_after"], errors="coerce").fillna(0)
        m[f"{v}_delta"] = m[f"{v}_after"] - m[f"{v}_before"]
    return m


def diff_analyses(before, after, **kw) -> TraceDiff:
    """Compare two traces (``Trace`` objects or trace paths, read with ``kw``)."""
    a = before if isinstance(before, Trace) else Trace(before, **kw)
    b = after if isinstance(after, Trace) else Trace(after, **kw)
    rows = []
    for name in TOTALS:
        vb, va = (float(x.h2d()["host_stall_us"].sum()) if name == "h2d_host_stall_us" else float(x.summary()[name])
                  for x in (a, b))
        rows.append({"metric": name, "before": vb, "after": va, "delta": va - vb,
                     "ratio": va / vb if vb else float("nan")})
    totals = pd.DataFrame(rows)
    streams = _merge(a.idle(), b.idle(), ["device", "stream"], ["ops_count", "busy_us", "idle_us", *CAUSES])
    sites = _merge(a.call_sites(), b.call_sites(), ["call_site"], ["idle_overlap_us", "bubble_count"])
    sites = sites.reindex(sites["idle_overlap_us_delta"].abs().sort_values(ascending=False).index).reset_index(drop=True)
    ca, cb = a.copies().copies, b.copies().copies
    copies = _merge(ca.assign(count=1), cb.assign(count=1), ["direction", "kind"], ["count", "bytes", "host_stall_us"])
    kernels = _merge(a.kernels(), b.kernels(), ["name"], ["count", "total_us"])
    kernels = kernels.reindex(kernels["total_us_delta"].abs().sort_values(ascending=False).index).reset_index(drop=True)
    return TraceDiff(before=a, after=b, totals=totals, streams=streams, call_sites=sites, copies=copies, kernels=kernels)
