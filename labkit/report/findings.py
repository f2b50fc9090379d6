"""The lab's answers to "why did vLLM #40143 gain 1.27x?", one per method, read from recorded results.

Each answer (:class:`Finding`) sets the lab's figure beside the PR's published one
(``labkit.mm.overlap.PR40143``), says what the method leaves out, where its figure was made
(machine, device, source: measured-gpu, measured-cpu or simulated) and which notebook page
shows it. Every figure is read from a result file under ``data/results/<machine>/`` through the
same labkit functions the notebooks use; a method whose result is not recorded here gives no
answer (its row is left out, never shown empty).

The methods, in the order the index and README list them:

- ``mini_engine_graphs``: the lab's mini engine under full CUDA graphs (``engine``, notebook 02);
- ``h200_eager``: the same engine measured eagerly on a GPU (``engine`` measured-gpu, notebook 02);
- ``vllm_cpu_ab``: vLLM's own server on its CPU build, baseline vs merged (``vllm_ab``, notebook 08);
- ``sim_gpu_vllm_host``: the simulated GPU fed with real vLLM's host phases
  (``engine_vllm_host_off_host`` / ``engine_vllm_host``, notebook 08);
- ``bubble_model``: the bubble model fed with the lab's measured scheduler saving (``mm_overlap``, notebook 01);
- ``serve_sim``: the serving simulator (``serve_sim``, rows ``arm``, ``gpu``, ``metric``,
  ``predicted``, ``published``, ``error``), where it is recorded;
- ``serve_sim_host_per_request``: the same with one host time per request per step fitted to
  pr40143's published TPOT (``serve_sim_host_per_request``).

``python -m labkit.report.findings --readme README.md`` rewrites the README's block between
:data:`BEGIN` and :data:`END` from the recorded results (``--check`` only compares).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.errors import UsageError

logger = logging.getLogger(__name__)

__all__ = ["Finding", "lab_findings", "findings_markdown", "rewrite_readme", "BEGIN", "END", "METHODS"]

BEGIN = "<!-- findings:begin -->"
END = "<!-- findings:end -->"


@dataclass(frozen=True)
class Finding:
    """One method's answer. ``value``/``published_value``: the two figures as numbers (ratios
    after/before, or a fraction for ``bubble_model``); ``figure``/``published``: the same in words;
    ``detail``: the figures behind it; ``result``: ``machine/name.json`` it was read from."""

    key: str
    method: str
    figure: str
    value: float
    published: str
    published_value: float
    detail: str
    leaves_out: str
    source: str
    machine: str
    device: str
    result: str
    labkit_commit: str
    notebook: str

    def as_dict(self) -> dict:
        return asdict(self)


# -- helpers -------------------------------------------------------------------------------------

def _published():
    from labkit.mm.overlap import PR40143

    return PR40143


def _tpot_ratio_published() -> float:
    """The published mean TPOT before / after (the figure a TPOT ratio is set beside)."""
    pub = _published()
    return pub.mean_tpot_ms_before / pub.mean_tpot_ms_after


def _result_file(res) -> str:
    if res.path:
        p = Path(res.path)
        return f"{p.parent.name}/{p.name}"
    return f"{res.slug}/{res.name}.json"


def _device_words(res, *, simulated_gpu: str | None = None) -> str:
    """Where a figure was made, in words: the GPU, the CPU, or the simulated GPU and the host."""
    m = res.machine or {}
    cpu = f"{m.get('cpu_model') or 'CPU'}, {m.get('cpu_cores') or '?'} cores"
    if simulated_gpu:
        return f"simulated {simulated_gpu}; host {cpu}"
    if m.get("gpu_name"):
        return str(m["gpu_name"])
    return cpu


def _newest(results):
    return sorted(results, key=lambda r: r.created or "", reverse=True)


def _by_source(results, order):
    """``results`` ordered by source preference, newest first within a source."""
    return sorted(_newest(results), key=lambda r: order.index(r.source) if r.source in order else len(order))


def _profile_gpu(params: dict) -> str:
    """The simulated GPU in words: its device profile (``h200`` -> "H200 profile"), parametric ones so named."""
    if params.get("profile_parametric"):
        return "GPU, parametric profile"
    return f"{str(params['profile']).upper()} profile" if params.get("profile") else "GPU"


# -- one function per method ---------------------------------------------------------------------

_PAIR_40143 = "#40143: list / tensor placeholders"


def _engine_pair(res, mode: str):
    from labkit.engine.recorded import before_after_ratios

    table = before_after_ratios(res.rows)
    if table.empty:
        return None
    hit = table[(table["pair"] == _PAIR_40143) & (table["cudagraph"] == mode)]
    return None if hit.empty else hit.iloc[0].to_dict()


def _mini_engine_graphs(root) -> Finding | None:
    from labkit.engine.recorded import ratio_reading
    from labkit.results import load_results

    for res in _by_source(load_results(root, name="engine"), ("measured-gpu", "simulated")):
        pair = _engine_pair(res, "full")
        reading = ratio_reading(res.rows, "full")
        if pair is None or reading is None:
            continue
        gpu = None if res.source == "measured-gpu" else _profile_gpu(res.params)
        return Finding(
            key="mini_engine_graphs", method="The lab's mini engine under full CUDA graphs",
            figure=f"{pair['ratio']:.2f}x output tok/s", value=float(pair["ratio"]),
            published=f"{pair['published_ratio']:.2f}x output tok/s", published_value=float(pair["published_ratio"]),
            detail=(f"host step {reading['host_before_ms']:.1f} ms before the fix, under the "
                    f"{reading['device_ms']:.1f} ms device step: async scheduling hides the scheduler"),
            leaves_out=("vLLM's own host work (input preparation, output processing, detokenizing) and "
                        "Gemma-4-E4B's longer device step: its host side is a small scheduler, the metadata "
                        "and one graph replay"),
            source=res.source, machine=res.slug, device=_device_words(res, simulated_gpu=gpu),
            result=_result_file(res), labkit_commit=res.labkit_commit, notebook="02_idle_bubbles")
    return None


def _h200_eager(root) -> Finding | None:
    from labkit.results import load_results

    for res in _newest([r for r in load_results(root, name="engine") if r.source == "measured-gpu"]):
        pair = _engine_pair(res, "none")
        if pair is None:
            continue
        return Finding(
            key="h200_eager", method=f"The lab's engine on {_device_words(res)}, eager",
            figure=f"{pair['ratio']:.2f}x output tok/s", value=float(pair["ratio"]),
            published=f"{pair['published_ratio']:.2f}x output tok/s", published_value=float(pair["published_ratio"]),
            detail=(f"device idle {pair['before_idle_frac']:.0%} before, {pair['after_idle_frac']:.0%} after; "
                    f"a {res.size} run"),
            leaves_out=("CUDA graphs, which vLLM decodes under: eagerly every op is launched from Python, "
                        "every variant is host-bound and the scheduler's whole cost shows in the step"),
            source=res.source, machine=res.slug, device=_device_words(res),
            result=_result_file(res), labkit_commit=res.labkit_commit, notebook="02_idle_bubbles")
    return None


def _vllm_cpu_ab(root) -> Finding | None:
    from labkit.results import load_results
    from labkit.vllm.server.ab_results import variant_summary

    for res in _by_source(load_results(root, name="vllm_ab"), ("measured-gpu", "measured-cpu")):
        table = variant_summary(res.rows)
        if table.empty or "mean_tpot_us" not in table:
            continue
        by = table.set_index("variant")
        if not {"baseline", "merged"} <= set(by.index):
            continue
        before, after = by.loc["baseline"], by.loc["merged"]
        ratio = float(before["mean_tpot_us"] / after["mean_tpot_us"])
        tok = ""
        if "output_throughput_tok_s" in by:
            tok = f"; output tok/s {after['output_throughput_tok_s'] / before['output_throughput_tok_s']:.2f}x"
        on_cpu = res.source == "measured-cpu"
        version = res.params.get("vllm_version")
        return Finding(
            key="vllm_cpu_ab",
            method=f"vLLM {version}'s own server" + (" on its CPU build" if on_cpu else "") + ", baseline vs merged",
            figure=f"{ratio:.2f}x TPOT", value=ratio,
            published=f"{_tpot_ratio_published():.2f}x TPOT", published_value=_tpot_ratio_published(),
            detail=(f"mean TPOT {before['mean_tpot_us'] / 1e3:.1f} -> {after['mean_tpot_us'] / 1e3:.1f} ms, "
                    f"median of {int(before['repeats'])} runs each{tok}"),
            leaves_out=("the GPU: the CPU build runs the forward on the host with async scheduling off, so "
                        "every ms of host time is a ms of TPOT; a made model with dummy weights"
                        if on_cpu else "the PR's model and images where the run used others"),
            source=res.source, machine=res.slug, device=_device_words(res),
            result=_result_file(res), labkit_commit=res.labkit_commit, notebook="08_inside_vllm")
    return None


def _host_ratio(res):
    """The predicted full-graph, async-scheduling ratio baseline -> pr40143 of an ``engine_vllm_host*`` result."""
    from labkit.engine.hostfrom import ratio_rows

    for r in ratio_rows(res.rows, _published()):
        if r["cudagraph"] == "full" and r["async_scheduling"] and r["after"] == "pr40143":
            return r
    return None


def _sim_gpu_vllm_host(root) -> Finding | None:
    from labkit.results import load_results

    off = {r.slug: r for r in reversed(_newest(load_results(root, name="engine_vllm_host_off_host")))}
    cpu = {r.slug: r for r in reversed(_newest(load_results(root, name="engine_vllm_host")))}
    # the newest machine that recorded the steps with the forward off the host, else the newest at all
    order = [r.slug for r in _newest(list(off.values()))] + [r.slug for r in _newest(list(cpu.values()))]
    for slug in dict.fromkeys(order):
        main, other = (off.get(slug), cpu.get(slug)) if slug in off else (cpu.get(slug), None)
        ratio = _host_ratio(main)
        if ratio is None:
            continue
        other_ratio = _host_ratio(other) if other is not None else None
        how = "the forward off the host" if main is off.get(slug) else "the forward on the host, as measured"
        detail = (f"host phases with {how}: TPOT {ratio['tpot_before_ms']:.1f} -> {ratio['tpot_after_ms']:.1f} ms, "
                  f"published {ratio['published_tpot_before_ms']:.2f} -> {ratio['published_tpot_after_ms']:.2f}")
        if other_ratio is not None:
            detail += f"; {other_ratio['tok_s_ratio']:.2f}x with the CPU's forward left between them"
        return Finding(
            key="sim_gpu_vllm_host", method="The simulated GPU fed with real vLLM's host, full CUDA graphs",
            figure=f"{ratio['tok_s_ratio']:.2f}x output tok/s", value=float(ratio["tok_s_ratio"]),
            published=f"{ratio['published_tok_s_ratio']:.2f}x output tok/s",
            published_value=float(ratio["published_tok_s_ratio"]), detail=detail,
            leaves_out=("a real device: the device step is the lab's text stack timed by the GPU profile, "
                        "shorter than Gemma-4-E4B's, and the host is the recording machine's CPU, "
                        "not the PR machine's"),
            source=main.source, machine=main.slug, device=_device_words(main, simulated_gpu=_profile_gpu(main.params)),
            result=_result_file(main), labkit_commit=main.labkit_commit, notebook="08_inside_vllm")
    return None


def _bubble_model(root) -> Finding | None:
    from labkit.results import load_results

    pub = _published()
    for res in _newest(load_results(root, name="mm_overlap")):
        row = next((r for r in res.rows if r.get("case") == "measured"), None)
        if row is None or row.get("explained_fraction") is None:
            continue
        return Finding(
            key="bubble_model", method="The bubble model fed with the lab's measured scheduler saving",
            figure=f"{row['explained_fraction']:.0%} of the TPOT drop", value=float(row["explained_fraction"]),
            published=f"TPOT -{pub.tpot_saving_ms:.2f} ms", published_value=1.0,
            detail=(f"saving {row['host_saving_ms']:.2f} of {row['published_tpot_saving_ms']:.2f} ms per step; "
                    f"predicts {row['predicted_throughput_gain']:.2f}x output tok/s"),
            leaves_out=("everything on the host but the scheduler's placeholder loop, timed on the recording "
                        "machine; the device step is taken from the published TPOT, not measured"),
            source=res.source, machine=res.slug, device=f"bubble model; saving timed on {_device_words(res)}",
            result=_result_file(res), labkit_commit=res.labkit_commit, notebook="01_placeholder_scheduler")
    return None


#: which arm of a serving A/B is the one before the fix, and which after, by name
_BEFORE_ARMS = ("baseline", "before", "tensor")
_AFTER_ARMS = ("pr40143", "after", "merged", "list")


def _serve_sim(root) -> Finding | None:
    return _serve_sim_finding(root, "serve_sim", "The serving simulator (labkit bench serve-sim)",
                              lambda res: "a real GPU and server: every figure is simulated")


def _serve_sim_host_fit(root) -> Finding | None:
    def leaves_out(res) -> str:
        ns = (res.params.get("fitted") or {}).get("host_per_request_ns")
        what = f"{ns / 1e3:.0f} us" if ns is not None else "a host time"
        return f"the host it fits, {what} per request per step in both arms, is not measured"

    return _serve_sim_finding(root, "serve_sim_host_per_request",
                              "The serving simulator, one host time per request fitted", leaves_out, beyond=0.10)


def _serve_sim_finding(root, name: str, method: str, leaves_out, beyond: float | None = None) -> Finding | None:
    from labkit.results import load_results
    from labkit.serve.bench import named_gpu

    for res in _newest(load_results(root, name=name)):
        named = named_gpu(res)
        rows = [r for r in res.rows if r.get("metric") in ("output_throughput", "mean_tpot_ms")
                and (named is None or r.get("gpu") == named)]
        arms = list(dict.fromkeys(r.get("arm") for r in rows))
        before = next((a for a in arms if a in _BEFORE_ARMS), None)
        after = next((a for a in arms if a in _AFTER_ARMS), None)
        if before is None or after is None:
            continue
        for metric in ("output_throughput", "mean_tpot_ms"):
            got = {r["arm"]: r for r in rows if r.get("metric") == metric and r.get("predicted") is not None}
            if before not in got or after not in got:
                continue
            b, a = got[before], got[after]
            if metric == "output_throughput":
                ratio, unit = a["predicted"] / b["predicted"], "output tok/s"
                published, shown = _published().throughput_gain, f"{a['predicted']:.0f}"
            else:
                ratio, unit = b["predicted"] / a["predicted"], "TPOT"
                published, shown = _tpot_ratio_published(), f"{a['predicted']:.2f} ms"
            pub_after = f" vs published {a['published']:g}" if a.get("published") is not None else ""
            gpu = a.get("gpu") or "GPU"
            misses = _serve_sim_misses(res, named, before, after, beyond=beyond)
            return Finding(
                key=name, method=method,
                figure=f"{ratio:.2f}x {unit}", value=float(ratio),
                published=f"{published:.2f}x {unit}", published_value=float(published),
                detail=f"{after} predicted {shown}{pub_after}; arms {before} and {after} on {gpu}",
                leaves_out=leaves_out(res) + (f"; the absolute times miss ({misses})" if misses else ""),
                source=res.source, machine=res.slug, device=f"simulated {gpu}; host {_device_words(res)}",
                result=_result_file(res), labkit_commit=res.labkit_commit, notebook="08_inside_vllm")
    return None


def _serve_sim_misses(res, gpu, before: str, after: str, beyond: float | None = None) -> str:
    """``mean TPOT 18.9 -> 12.7 ms vs published 33.8 -> 24.6`` and the like for the named GPU's
    mean TPOT, mean TTFT and duration, where the result holds them with the published figure
    (``beyond``: only those where an arm misses by more than that fraction)."""
    from labkit.serve.bench import ABSOLUTE_METRICS, before_after, compared_rows

    rows, parts = compared_rows(res, gpu), []
    for metric, label, scale, unit in ABSOLUTE_METRICS:
        pair = before_after(rows, metric, before, after)
        if pair:
            b, a = pair
            if beyond is not None and all(abs(x.get("error") or 0.0) <= beyond for x in pair if not x.get("fitted")):
                continue
            parts.append(f"{label} {b['predicted'] * scale:.3g} -> {a['predicted'] * scale:.3g} {unit} vs published "
                         f"{b['published'] * scale:.3g} -> {a['published'] * scale:.3g}")
    return "; ".join(parts)


#: key -> the function giving that method's answer (None where its result is not recorded)
METHODS = {
    "mini_engine_graphs": _mini_engine_graphs,
    "h200_eager": _h200_eager,
    "vllm_cpu_ab": _vllm_cpu_ab,
    "sim_gpu_vllm_host": _sim_gpu_vllm_host,
    "bubble_model": _bubble_model,
    "serve_sim": _serve_sim,
    "serve_sim_host_per_request": _serve_sim_host_fit,
}


def lab_findings(root: Path | str | None = None) -> list[Finding]:
    """The lab's answers to why #40143 gained what it did, one per method whose result is recorded
    under ``root`` (default: the results store), in :data:`METHODS` order."""
    out = []
    for key, answer in METHODS.items():
        try:
            found = answer(root)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:  # rows of another layout
            logger.warning("findings: no %s answer, its result's rows lack what it reads (%s: %s)",
                           key, type(exc).__name__, exc)
            found = None
        if found is not None:
            out.append(found)
    return out


# -- the README block ----------------------------------------------------------------------------

def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def findings_markdown(findings: list[Finding], *, notebooks: str = "notebooks") -> str:
    """The findings as a Markdown table (the README's block between the markers)."""
    pub = _published()
    lines = [
        f"Why did #40143 gain {pub.throughput_gain:.2f}x? (published: {pub.name}, mean TPOT "
        f"{pub.mean_tpot_ms_before} -> {pub.mean_tpot_ms_after} ms, output {pub.output_tok_s_before} -> "
        f"{pub.output_tok_s_after} tok/s). Each answer is read from its result file "
        "(`python -m labkit.report.findings --readme README.md` rewrites this table).",
        "",
        "| Method | The lab's figure | Published | What it leaves out | Source, machine | Page |",
        "|---|---|---|---|---|---|",
    ]
    for f in findings:
        lines.append(
            f"| {_cell(f.method)} | **{_cell(f.figure)}**<br>{_cell(f.detail)} | {_cell(f.published)} | "
            f"{_cell(f.leaves_out)} | {f.source}, `{f.machine}` ({_cell(f.device)}); `{f.result}` | "
            f"[{f.notebook[:2]}]({notebooks}/{f.notebook}.py) |")
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """``text`` with what lies between :data:`BEGIN` and :data:`END` replaced by ``block``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise UsageError(f"the file needs exactly one {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def rewrite_readme(path: Path | str, root: Path | str | None = None, *, check: bool = False) -> bool:
    """Rewrite the findings block of ``path`` from the results under ``root``; True when it changed
    (with ``check``, nothing is written)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    new = replace_block(text, findings_markdown(lab_findings(root)))
    if new == text:
        return False
    if not check:
        from labkit.fileio import write_atomic

        write_atomic(path, new)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m labkit.report.findings",
        description="The lab's answers to why #40143 gained what it did, from the recorded results.")
    p.add_argument("--readme", metavar="FILE", help=f"rewrite the block between {BEGIN} and {END} in FILE")
    p.add_argument("--check", action="store_true",
                   help="with --readme: exit 1 when the block is out of date, write nothing")
    p.add_argument("--results", metavar="DIR", help="results folder (default: the results store)")
    args = p.parse_args(argv)
    if args.check and not args.readme:
        raise UsageError("--check needs --readme FILE")
    if args.readme:
        changed = rewrite_readme(args.readme, args.results, check=args.check)
        if args.check:
            print(f"{args.readme}: findings block {'out of date' if changed else 'up to date'}")
            return 1 if changed else 0
        print(f"{args.readme}: findings block {'rewritten' if changed else 'already up to date'}")
        return 0
    print(findings_markdown(lab_findings(args.results)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
