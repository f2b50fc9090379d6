"""The answers of the host-side pages: 00 (the machine), 01 (#40143's scheduler loop), 06 (every machine)."""

from __future__ import annotations

from labkit.report.answers.element import Answer, cite, esc, num, row
from labkit.results import CALIBRATION, MM_DECODE_STEP, find, find_all
from labkit.bench import format_table
from labkit.viz.labels import bars_html

NO_RESULT = "No {what} recorded yet: {how}."


def _this_machine() -> str | None:
    from labkit.device import describe_machine

    return describe_machine("cpu").get("slug")


def _calibration_costs(result) -> dict:
    """``{variant: median ns}`` of a calibration result's CPU rows."""
    return {r["variant"]: r["median_ns"] for r in result.rows if r.get("kind") == "cpu"}


def calibration_rows(results) -> list[dict]:
    """Per machine that recorded a calibration (its full run where it has one): the tensor index +
    ``int()`` (``tensor_index_int_ns``), the list index (``list_index_ns``) and their ``ratio``."""
    out = []
    for r in find_all(CALIBRATION, results=results):
        costs = _calibration_costs(r)
        if "tensor_index_int" in costs and "list_index" in costs:
            out.append({"machine": r.slug, "source": r.source, "size": r.size,
                        "tensor_index_int_ns": costs["tensor_index_int"], "list_index_ns": costs["list_index"],
                        "ratio": costs["tensor_index_int"] / costs["list_index"]})
    return out


def environment(results=None, machine: str | None = None) -> Answer:
    """00: what one tensor index + ``int()`` costs against a list index (the per-call cost #40143
    removed), as recorded on this machine (else on another one), beside every machine's recording."""
    results = list(find_all(CALIBRATION, results=results))
    machine = machine if machine is not None else _this_machine()
    cal = find(CALIBRATION, machine=machine, results=results,
               where=lambda rows: any(r.get("variant") == "tensor_index_int" for r in rows))
    if cal is None:
        return Answer(NO_RESULT.format(what="calibration", how="run `labkit calibrate`"))
    c = _calibration_costs(cal)
    here = "this machine, " if cal.slug == machine else ""
    text = (f"Recorded on {here}{esc(cal.slug)} ({esc(cal.size)} size): reading one element of a CPU tensor "
            f"and converting it with <code>int()</code> costs {num(c['tensor_index_int'] / 1e3, ' us')} against "
            f"{num(c['list_index'], ' ns')} for a list, {num(c['tensor_index_int'] / c['list_index'], 'x')}. "
            f"#40143 took 4,096 such reads (128 requests x 32 images) out of every decode step.")
    detail = format_table(calibration_rows(results), columns=["machine", "tensor_index_int_ns", "list_index_ns", "ratio"],
                          rename={"tensor_index_int_ns": "tensor index + int()", "list_index_ns": "list index"})
    return Answer(text, (cite(cal),), detail._repr_html_())


def placeholder_scheduler(results=None) -> Answer:
    """01: one decode step's encoder scheduling at the PR's shape, per placeholder and strategy."""
    step = find(MM_DECODE_STEP, results=results, where=lambda rows: row(rows, combo="tensor+loop") and row(rows, combo="list+loop"))
    if step is None:
        return Answer(NO_RESULT.format(what="mm_decode_step result", how="run `labkit bench mm --size full`"))
    before, pr = row(step.rows, combo="tensor+loop"), row(step.rows, combo="list+loop")
    shape = f"{before.get('num_requests')} requests x {before.get('images_per_request')} images"
    text = (f"One steady decode step at {esc(shape)} on {esc(step.slug)} ({esc(step.source)} host time): "
            f"#40143's list + loop takes {num(pr['median_ns'] / 1e6, ' ms')} against "
            f"{num(before['median_ns'] / 1e6, ' ms')} with tensor placeholders, {num(pr['speedup_vs_before'], 'x')} faster.")
    best = min(step.rows, key=lambda r: r["median_ns"])
    if best["combo"] not in ("tensor+loop", "list+loop"):
        text += (f" A per-request cursor ({esc(best['combo'])}) needs {num(best['median_ns'] / 1e3, ' us')} "
                 f"({num(best['speedup_vs_pr'], 'x')} faster than #40143).")
    sources = [cite(step)]
    detail = bars_html([(r["combo"], r["median_ns"] / 1e6) for r in step.rows], "ms",
                       highlight=("tensor+loop",), caption=f"encoder scheduling per decode step, {shape}")
    return Answer(text, tuple(sources), detail)


def compare_gpus(results=None) -> Answer:
    """06: the one host figure every machine records (the calibration's tensor index + ``int()``), from
    the fastest machine to the slowest."""
    results = find_all(CALIBRATION, results=results)
    costs = sorted(calibration_rows(results), key=lambda r: r["tensor_index_int_ns"])
    if not costs:
        return Answer(NO_RESULT.format(what="calibration", how="run `make report` on a machine"))
    fast, slow = costs[0], costs[-1]
    text = (f"Every machine records the host cost behind #40143, one tensor index + <code>int()</code>: from "
            f"{num(fast['tensor_index_int_ns'] / 1e3, ' us')} on {esc(fast['machine'])} to "
            f"{num(slow['tensor_index_int_ns'] / 1e3, ' us')} on {esc(slow['machine'])} "
            f"({num(slow['tensor_index_int_ns'] / fast['tensor_index_int_ns'], 'x')}), each on that machine's own "
            "CPU. Below: which results each machine recorded.")
    detail = bars_html([(r["machine"], r["tensor_index_int_ns"] / 1e3) for r in costs], "us", log=False,
                       caption="tensor index + int() per call, calibration")
    ends = {r.slug: r for r in results}
    return Answer(text, tuple(cite(ends[r["machine"]]) for r in (fast, slow)), detail)
