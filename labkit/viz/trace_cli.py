"""``labkit analyze PATH... [--vs OTHER] [--json OUT] [--html OUT]``: the trace analyzer's command line and page."""

from __future__ import annotations

import argparse
import html
import importlib.util
import math
import os
import re
from pathlib import Path

from labkit.errors import UsageError
from labkit.trace.analysis.diff import diff_analyses
from labkit.trace.analysis.many import TraceSet, expand_paths
from labkit.trace.analysis.trace import Trace
from labkit.trace.outputs import CSS, check_outputs, finish, html_table, json_text
from labkit.trace.read.columns import keep_freed_memory


def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = "Analyse PyTorch/vLLM profiler traces: idle bubbles, causes, copies."
    parser.add_argument("trace", nargs="+", metavar="PATH",
                        help="Kineto trace (.json or .json.gz), e.g. vLLM's *.pt.trace.json.gz, or a folder "
                             "(every *.json / *.json.gz below it); several traces get a combined view")
    parser.add_argument("--vs", metavar="OTHER", help="a second trace to compare against (TRACE = before, OTHER = after)")
    parser.add_argument("--json", metavar="OUT", help="write the analysis as JSON to OUT")
    parser.add_argument("--html", metavar="OUT",
                        help="write a single offline HTML report to OUT (one trace; needs plotly)")
    parser.add_argument("--top", type=int, default=10, help="how many call sites / bubbles to list (default 10)")
    parser.add_argument("--steps", default=None, metavar="REGEX",
                        help="regex naming step spans (default: ProfilerStep#N, else vLLM's execute_context_* / "
                             "execute_model, found automatically)")
    parser.add_argument("--kernel-wait-us", type=float, default=None,
                        help="gaps shorter than this with work queued count as kernel wait (default 30, like HTA)")
    parser.add_argument("--skip-malformed", action="store_true",
                        help="skip malformed events even when they are more than 0.1%% of a trace")
    parser.add_argument("--jobs", type=int, default=None,
                        help="local processes: one per trace for several traces, byte ranges of one large "
                             "trace otherwise (default: core count)")
    parser.add_argument("--dask", metavar="ADDRESS", default=None,
                        help="run the per-trace work on an existing Dask distributed scheduler (needs labkit[scale])")
    return parser


def _options(args) -> dict:
    kw: dict = {"step_pattern": args.steps} if args.steps is not None else {}
    if args.kernel_wait_us is not None:
        if not math.isfinite(args.kernel_wait_us) or args.kernel_wait_us < 0:
            raise UsageError("--kernel-wait-us must be a finite number >= 0")
        kw["kernel_wait_us"] = args.kernel_wait_us
    if args.skip_malformed:
        kw["skip_malformed"] = True
    if args.steps is not None:
        try:
            re.compile(args.steps)
        except re.error as exc:
            raise UsageError(f"bad step pattern {args.steps!r}: {exc}") from None
    return kw


def main(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise UsageError("--top must be >= 1")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be >= 1")
    kw = _options(args)
    traces = expand_paths(args.trace)
    if args.vs is not None and not Path(args.vs).is_file():
        raise UsageError(f"no such trace file: {args.vs}")
    several = len(traces) > 1
    if several and (args.vs or args.html):
        raise UsageError("--vs and --html take one trace; give a single PATH")
    outs = check_outputs({"--json": args.json, "--html": args.html}, traces + ([Path(args.vs)] if args.vs else []))
    if args.html and importlib.util.find_spec("plotly") is None:
        raise UsageError("--html needs plotly, which is not installed (pip install 'labkit[notebook]')")
    jobs = args.jobs or os.cpu_count() or 1
    keep_freed_memory()
    if several or args.dask:
        return _main_many(args, traces, kw, outs, jobs)
    return _main_one(args, traces[0], kw, outs, jobs)


def _main_one(args, trace: Path, kw: dict, outs: dict[str, Path], jobs: int) -> int:
    before = Trace(trace, jobs=jobs, **kw)
    diff = diff_analyses(before, Trace(args.vs, jobs=jobs, **kw)) if args.vs else None
    texts: dict[Path, str] = {}  # every output built first, then written: a failure leaves no partial file
    if "--json" in outs:
        payload = before.to_json(top=args.top)
        if diff is not None:
            payload = {"before": payload, "after": diff.after.to_json(top=args.top), "diff": diff.to_json(top=args.top)}
        texts[outs["--json"]] = json_text(payload)
    if "--html" in outs:
        texts[outs["--html"]] = render_report(before, other=diff.after if diff is not None else None, top=args.top)
    lines = before.summary_lines(top=min(args.top, 10))
    if diff is not None:
        lines += ["", *diff.after.summary_lines(top=min(args.top, 10)), "", *diff.summary_lines(top=min(args.top, 10))]
    return finish(lines, texts)


def _main_many(args, traces: list[Path], kw: dict, outs: dict[str, Path], jobs: int) -> int:
    several = TraceSet(traces, jobs=jobs, dask_address=args.dask, top=args.top, **kw)
    texts = {outs["--json"]: json_text(several.to_json())} if "--json" in outs else {}
    return finish(several.summary_lines(), texts)


def _source(an) -> str:
    s = an.source()
    cls, word = ("sim", "simulated") if s["simulated"] else (("gpu", "measured on a GPU") if s["has_device_events"]
                                                             else ("host", "host only"))
    items = [f"<span class='badge {cls}'>{word}</span>",
             f"<b>{html.escape(str(s['file']))}</b>", f"GPU: {html.escape(str(s.get('gpu') or 'none recorded'))}",
             f"{s['events']} events"]
    if s["skipped_events"]:
        items.append(f"<span class='flag'>{s['skipped_events']} malformed events skipped</span>")
    return "<p>" + " &middot; ".join(items) + "</p>"


def _section(an, top: int) -> str:
    parts = [_source(an)]
    if not an.source()["has_device_events"]:
        parts.append("<p>No device events in this trace: only host time is reported.</p>")
    parts.append("<h2>Device streams: busy and idle (us)</h2>" + html_table(an.idle()))
    parts.append(f"<h2>Host call sites during host-wait idle (top {top})</h2>"
                 "<p>Device idle time during which the launching thread was inside each call site "
                 "(innermost annotation, Python frame, CPU op, runtime call).</p>"
                 + html_table(an.call_sites()[["call_site", "idle_overlap_us", "bubble_count", "share"]], top))
    big = an.bubbles().sort_values("dur_us", ascending=False).head(top)
    parts.append(f"<h2>Largest bubbles (top {top})</h2>" + html_table(
        big[["device", "stream", "start_us", "dur_us", "category", "prev_op", "next_op", "call_site"]]))
    h = an.h2d()
    parts.append(f"<h2>Host-to-device copies ({len(h)}: {int((h['kind'] == 'pageable').sum())} pageable, "
                 f"{int((h['kind'] == 'pinned').sum())} pinned)</h2>")
    for f in an.copies().flags:
        parts.append(f"<p class='flag'>repeated small pageable copies: {f['count']} copies ({f['bytes']} bytes, "
                     f"{f['host_stall_us']:.1f} us host stall) at {html.escape(f['call_site'])} "
                     f"- rule: {html.escape(f['rule'])}</p>")
    parts.append(html_table(an.copies().by_call_site, top))
    parts.append("<h3>per step</h3>" + html_table(an.copies().by_step))
    if len(an.steps()):
        parts.append("<h2>Steps</h2>" + html_table(an.steps()))
    parts.append("<h2>HTA-compatible idle breakdown (us)</h2>" + html_table(an.hta_compatible()))
    parts.append(f"<h2>Device ops by total time (top {top})</h2>" + html_table(an.kernels(), top))
    return "\n".join(parts)


def render_report(analysis, *, other=None, top: int = 10) -> str:
    """The page of a ``Trace`` (or of two, before and after) as one HTML string (plotly.js inline)."""
    import plotly.io as pio  # optional (labkit[report]): only the page needs plotly
    from plotly.offline import get_plotlyjs

    from labkit.viz.timeline import plot_idle_breakdown, plot_timeline, plot_timeline_pair

    if other is None:
        figs = [plot_idle_breakdown(analysis), plot_timeline(analysis)]
        title = f"Trace analysis: {analysis.source()['file']}"
    else:
        figs = [plot_timeline_pair(analysis, other)]
        title = f"Trace comparison: {analysis.source()['file']} vs {other.source()['file']}"
    fig_html = "\n".join(pio.to_html(f, full_html=False, include_plotlyjs=False, include_mathjax=False,
                                     config={"displaylogo": False}) for f in figs)
    body = [f"<h1>{html.escape(title)}</h1>", fig_html]
    if other is None:
        body.append(_section(analysis, top))
    else:
        d = diff_analyses(analysis, other)
        body.append("<h2>Before / after totals</h2>" + html_table(d.totals))
        body.append(f"<h2>Host call sites: change in host-wait idle (top {top})</h2>" +
                    html_table(d.call_sites[["call_site", "idle_overlap_us_before", "idle_overlap_us_after",
                                             "idle_overlap_us_delta"]], top))
        body.append("<h2>Copies</h2>" + html_table(d.copies))
        body.append(f"<h2>Kernels: largest changes (top {top})</h2>" + html_table(d.kernels, top))
        body.append("<h1>Before</h1>" + _section(analysis, top))
        body.append("<h1>After</h1>" + _section(other, top))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title>"
            f"<style>{CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            + "\n".join(body) + "</body></html>\n")
