"""The lab's one answer to "why did vLLM #40143 gain 1.27x?", and the evidence under it, read from results.

:func:`lab_findings` gives the answer (a paragraph, every number read from the recorded
``pr_table`` and census) and at most five evidence rows: the unit cost, the real engine's saving
per step, the real server's A/B on this CPU, the peaks with the one inferred unknown, and the
whole-run figures the lab does not predict, with the measurement that says why. A row whose
result is not recorded says why instead of its figure.
``labkit results --readme README.md`` rewrites README's block from the same call. docs/serve-sim.md
has the reasoning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.errors import UsageError
from labkit.results import CALIBRATION, PR_TABLE, VLLM_AB, VLLM_SERVE_TIMELINE, VLLM_STEP, find_all
from labkit.bench import sig3
from labkit.facts import PR40143, two_phases
from labkit.viz.vllm.inside_vllm import timeline_summary

__all__ = ["Evidence", "gains", "lab_findings", "findings_markdown", "rewrite_readme", "BEGIN", "END"]

BEGIN = "<!-- findings:begin -->"
END = "<!-- findings:end -->"
#: the census point the answer reads: #40143's shape
POINT = (128, 32)


@dataclass(frozen=True)
class Evidence:
    """One row under the answer: what it shows, the lab's figure (or why it is missing), the
    published figure it stands beside, where it was made and the page that shows it."""

    key: str
    what: str
    figure: str
    published: str
    source: str
    machine: str
    result: str
    notebook: str
    missing: bool = False


def _found(name: str, root, size: str | None = None) -> list:
    """The store's ``name`` results, one per machine, by slug: what README says is the same on any machine."""
    return find_all(name, root=root, size=size, here_first=False)


def _file(res) -> str:
    return f"{res.slug}/{Path(res.path).name}" if res.path else f"{res.slug}/{res.name}.json"


def _missing(key: str, what: str, why: str, notebook: str) -> Evidence:
    return Evidence(key, what, f"not recorded: {why}", "", "", "", "", notebook, missing=True)


def census_saving(res) -> dict | None:
    """The engine core's chain (off-host phases but ``process_outputs``) of the baseline and
    pr40143 at #40143's shape, ms, from a ``vllm_step`` result."""
    from labkit.serve.host import API_PHASE

    chain: dict = {}
    for r in res.rows:
        ph = str(r.get("phase", ""))
        if (r.get("num_requests"), r.get("images")) == POINT and ph.startswith("off_host:") \
                and ph not in ("off_host:step", f"off_host:{API_PHASE}") and r.get("median_us") is not None:
            chain[r["variant"]] = chain.get(r["variant"], 0.0) + float(r["median_us"]) / 1e3
    if "baseline" not in chain or "pr40143" not in chain:
        return None
    return {"before_ms": chain["baseline"], "after_ms": chain["pr40143"], "saving_ms": chain["baseline"] - chain["pr40143"]}


def _row(res, arm: str, gpu: str, metric: str) -> dict | None:
    return next((r for r in res.rows if (r["arm"], r["gpu"], r["metric"]) == (arm, gpu, metric)), None)


def _unit_cost(root, machine: str | None) -> Evidence:
    key, what = "unit_cost", "#40143's unit cost: one tensor read + int() against one list read"
    found = _found(CALIBRATION, root)
    for res in sorted(found, key=lambda r: r.slug != machine):  # the census machine's first
        by = {r.get("variant"): r.get("median_ns") for r in res.rows}
        if by.get("tensor_index_int") and by.get("list_index"):
            t, li = by["tensor_index_int"], by["list_index"]
            return Evidence(key, what, f"{sig3(t / 1e3)} us against {sig3(li)} ns ({sig3(t / li)}x)", "",
                            res.source, res.slug, _file(res), "00_environment")
    return _missing(key, what, "run `labkit calibrate --size full`", "00_environment")


def _engine_saving(root) -> Evidence:
    key, what = "engine_saving", "vLLM's real engine core at 128 x 32, forward off the host: the saving per step"
    for res in _found(VLLM_STEP, root, "full"):
        s = census_saving(res)
        if s is not None:
            return Evidence(key, what, f"{s['saving_ms']:.2f} ms a step ({s['before_ms']:.2f} -> {s['after_ms']:.2f} ms, "
                                       "baseline -> pr40143)", "", res.source, res.slug, _file(res), "08_inside_vllm")
    return _missing(key, what, "run `labkit bench vllm-step --size full` in .venv-vllm-cpu", "08_inside_vllm")


def _server_ab(root) -> Evidence:
    from labkit.vllm.server.ab_results import variant_summary

    key = "server_ab"
    for res in _found(VLLM_AB, root):
        table = variant_summary(res.rows)
        if table.empty or "mean_tpot_us" not in table:
            continue
        by = table.set_index("variant")
        after = next((a for a in ("pr40143", "merged") if a in by.index), None)
        if "baseline" not in by.index or after is None:
            continue
        sh = res.params.get("shape") or {}
        what = (f"vLLM {res.params.get('vllm_version')}'s own server on this CPU, baseline vs {after}: "
                f"{sh.get('num_prompts')} requests x {sh.get('images')} images of {sh.get('image_size')}, "
                f"{sh.get('input_len')} prompt and {sh.get('output_len')} output tokens, forward on the host")
        b, a = by.loc["baseline", "mean_tpot_us"] / 1e3, by.loc[after, "mean_tpot_us"] / 1e3
        pub = PR40143.before.mean_tpot_ms / PR40143.after.mean_tpot_ms
        return Evidence(key, what, f"mean TPOT {b:.1f} -> {a:.1f} ms ({b / a:.2f}x), median of "
                                   f"{int(by.loc['baseline', 'repeats'])} runs", f"{pub:.2f}x TPOT",
                        res.source, res.slug, _file(res), "08_inside_vllm")
    return _missing(key, "vLLM's own server on this CPU, before vs after", "run `scripts/vllm_ab.sh`", "08_inside_vllm")


def _peaks(res) -> Evidence:
    gpu = res.params["gpu"]
    bound = {(p["gpu"], p["arm"]): p["bound"] for p in res.params["peaks"] if p["regime"] == res.params["regime"]}
    parts = []
    for g in res.params["gpus"]:  # the published figure is the PR's GPU's: another GPU's is its own cap
        r = _row(res, "pr40143", g, "peak_output_tok_s")
        parts.append(f"{g.upper()} {r['predicted']:,.0f} ({r['error']:+.0%})" if g == gpu else
                     f"an {g.upper()} {bound[(g, 'pr40143')]}-bound at {r['predicted']:,.0f}")
    return Evidence("peaks", f"The full-batch peak after the fix, nothing fitted ({res.params['regime']} scheduling): "
                             f"{bound[(gpu, 'pr40143')]}-bound on the {gpu.upper()}, the baseline "
                             f"{bound[(gpu, 'baseline')]}-bound", "; ".join(parts),
                    f"{PR40143.after.peak_output_tok_s:,.0f} tok/s", res.source, res.slug, _file(res), "08_inside_vllm")


def _moved(timeline) -> tuple | None:
    """The workload whose finish spread moved most between arms on the server (the spreads of
    :func:`labkit.viz.vllm.inside_vllm.timeline_summary`): ``(shape, least s, most s)``."""
    by: dict = {}
    for r in timeline_summary(timeline).to_dict("records"):
        by.setdefault(f"{r['shape']}, {r['output_tokens']} out", []).append(r["finish_spread_s"])
    runs = [(shape, min(v), max(v)) for shape, v in by.items() if len(v) > 1 and min(v) > 0]
    return max(runs, key=lambda t: t[2] / t[1], default=None)


def whole_run(timeline=None) -> str:
    """Why the whole-run gain is not predicted, with how far this CPU's own server moved (``timeline``)."""
    spread = max(two_phases(PR40143.side(a))["finish_spread_s"] for a in ("baseline", "pr40143"))
    moved = _moved(timeline) if timeline is not None else None
    here = (f"; on this CPU's own vLLM server one workload's requests ({moved[0]}) finished {moved[1]:.1f} s apart "
            f"in one arm and {moved[2]:.1f} s in the other" if moved else "")
    return (f"The whole-run gain (published {PR40143.throughput_gain:.2f}x output tok/s, "
            f"{PR40143.before.mean_tpot_ms / PR40143.after.mean_tpot_ms:.2f}x mean TPOT) is not predicted: a run's "
            f"whole-run figures turn on how its server hands requests to the engine and on whether the first "
            f"requests' outputs outlast the others' prefills{here}, where the PR's average request finished "
            f"{spread:.1f} s before its last. The lab cannot time the PR machine's intake, so it claims the peaks only.")


def _whole_run(root) -> Evidence:
    key, what = "whole_run", ("The whole-run figures (output tok/s, mean TPOT and TTFT, duration, their gains): not "
                              "predicted; how far a run's finishes move on vLLM's own server on this CPU")
    for res in _found(VLLM_SERVE_TIMELINE, root):
        moved = _moved(res)
        if moved:
            return Evidence(key, what, f"{moved[0]}: requests finished {moved[1]:.1f} s apart in one arm, "
                                       f"{moved[2]:.1f} s in the other",
                            f"{PR40143.throughput_gain:.2f}x output tok/s", res.source, res.slug, _file(res),
                            "08_inside_vllm")
    return _missing(key, what, "run `scripts/vllm_ab.sh --timeline`", "08_inside_vllm")


def gains(res) -> str:
    """The opening of the answer: the predicted peak ratio on the named GPU beside the published one."""
    g = _row(res, "pr40143/baseline", res.params["gpu"], "gain_peak_output_tok_s")
    if g is None or g["predicted"] is None:
        return "This pr_table predates its gain rows: run `labkit bench serve-sim` again."
    return (f"Predicted on an {res.params['gpu'].upper()}: a peak ratio of {g['predicted']:.2f}x against the "
            f"published {g['published']:.2f}x.")


def _lab_range(inf: dict, key: str, scale: float) -> str:
    by = inf.get(key) or {}
    return ", ".join(f"{m} {v['min'] * scale:.2f}" + (f"-{v['max'] * scale:.2f}" if v["max"] > v["min"] else "")
                     for m, v in by.items())


def answer_text(res, census, timeline=None) -> str:
    """The answer, from a full ``pr_table`` result, the census's saving (:func:`census_saving`) and
    the server's timeline (:func:`whole_run`)."""
    p, gpu = res.params, res.params["gpu"]
    after = _row(res, "pr40143", gpu, "peak_output_tok_s")
    peaks = {(q["gpu"], q["arm"]): q for q in p["peaks"] if q["regime"] == p["regime"]}
    others = [g for g in p["gpus"] if g != gpu]
    other = (f"; an {others[0].upper()}'s {peaks[(others[0], 'pr40143')]['device_ms']:.1f} ms step caps it at "
             f"{_row(res, 'pr40143', others[0], 'peak_output_tok_s')['predicted']:,.0f}") if others else ""
    read = p["inferred"]["read_ns"]
    return (f"{gains(res)} {whole_run(timeline)} #40143 took {census['saving_ms']:.1f} ms of host work out of every "
            f"decode step at 128 requests x 32 images (vLLM's engine core, {census['before_ms']:.1f} -> "
            f"{census['after_ms']:.1f} ms). Under async scheduling a step lasts max(device, host). After the fix the "
            f"full-batch step is device-bound: the Gemma-4-E4B roofline's {peaks[(gpu, 'pr40143')]['device_ms']:.1f} ms "
            f"on an {gpu.upper()} predicts a peak of {after['predicted']:,.0f} tok/s against the published "
            f"{after['published']:,.0f} ({after['error']:+.1%}), nothing fitted{other}. Before it the step was "
            f"host-bound: the published peak puts the PR host's tensor read at {read['value'] / 1e3:.2f} us (the lab "
            f"measures {_lab_range(read, 'lab_measured_ns', 1e-3)} us).")


def lab_findings(root: Path | str | None = None) -> dict:
    """``{"answer": str | None, "why_no_answer": str | None, "evidence": [Evidence dicts]}``."""
    pr = next(iter(_found(PR_TABLE, root, "full")), None)
    census = next((s for s in (census_saving(r) for r in _found(VLLM_STEP, root, "full")) if s), None)
    evidence = [_unit_cost(root, pr.params.get("census_machine") if pr is not None else None), _engine_saving(root),
                _server_ab(root)]
    answer, why = None, None
    if pr is None:
        why = "no full pr_table result: run `labkit bench serve-sim`"
        evidence += [_missing("peaks", "The full-batch peaks", why, "08_inside_vllm"), _whole_run(root)]
    else:
        evidence += [_peaks(pr), _whole_run(root)]
        if census is None:
            why = "no full vllm_step census at 128 x 32"
        else:
            answer = answer_text(pr, census, next(iter(_found(VLLM_SERVE_TIMELINE, root)), None))
    return {"answer": answer, "why_no_answer": why, "evidence": [asdict(e) for e in evidence]}


# -- the README block ----------------------------------------------------------------------------

def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def findings_markdown(found: dict, *, notebooks: str = "notebooks") -> str:
    """The answer and its evidence as Markdown (README's block between the markers)."""
    lines = [f"**Why did #40143 gain {PR40143.throughput_gain:.2f}x?** "
             + (found["answer"] or f"No answer recorded: {found['why_no_answer']}."), "",
             "| Evidence | The lab's figure | Published | Made on | Page |", "|---|---|---|---|---|"]
    for e in found["evidence"]:
        where = "" if e["missing"] else f"{e['source']}, `{e['machine']}`; `{e['result']}`"
        lines.append(f"| {_cell(e['what'])} | {_cell(e['figure'])} | {_cell(e['published'])} | {where} | "
                     f"[{e['notebook'][:2]}]({notebooks}/{e['notebook']}.py) |")
    lines.append("")
    lines.append("Read from the recorded results (`labkit results --readme README.md` rewrites this block).")
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
