"""The answers of the host-side pages: 00 (the machine), 01 (#40143's scheduler loop), 06 (every machine)."""

from __future__ import annotations

from labkit.report.answers.element import Answer, bars_html, cite, esc, num
from labkit.report.answers.pick import of_name, pick, recorded, row
from labkit.viz.tables import format_table

NO_RESULT = "No {what} recorded yet: {how}."


def _this_machine() -> str | None:
    from labkit.device import describe_machine

    return describe_machine("cpu").get("slug")


def _calibration_costs(result) -> dict:
    """``{variant: median ns}`` of a calibration result's CPU rows."""
    return {r["variant"]: r["median_ns"] for r in result.rows if r.get("kind") == "cpu"}


def environment(results=None, machine: str | None = None) -> Answer:
    """00: what one tensor index + ``int()`` costs against a list index on this machine (the per-call
    cost #40143 removed), beside every machine that recorded a calibration."""
    results = recorded(results)
    machine = machine if machine is not None else _this_machine()
    cal = pick(results, "calibration", machine=machine,
               where=lambda rows: any(r.get("variant") == "tensor_index_int" for r in rows))
    if cal is None:
        return Answer(NO_RESULT.format(what="calibration", how="run `labkit calibrate`"))
    c = _calibration_costs(cal)
    ratio = c["tensor_index_int"] / c["list_index"]
    here = "this machine" if cal.slug == machine else esc(cal.slug)
    text = (f"On {here} ({esc(cal.slug)}, {esc(cal.source)}), reading one element of a CPU tensor and converting it "
            f"with <code>int()</code> costs {num(c['tensor_index_int'] / 1e3, ' us')} against "
            f"{num(c['list_index'], ' ns')} for a list: {num(ratio, 'x')}. That per-call cost, paid 4,096 times "
            f"per decode step at 128 requests x 32 images, is what #40143 removed.")
    table_rows = []
    for r in of_name(results, "calibration"):
        costs = _calibration_costs(r)
        if "tensor_index_int" in costs and "list_index" in costs:
            table_rows.append({"machine": r.slug, "source": r.source, "tensor_index_int_ns": costs["tensor_index_int"],
                               "list_index_ns": costs["list_index"],
                               "ratio": costs["tensor_index_int"] / costs["list_index"]})
    detail = format_table(table_rows, rename={"tensor_index_int_ns": "tensor index + int()",
                                              "list_index_ns": "list index"})._repr_html_()
    return Answer(text, tuple(cite(r) for r in of_name(results, "calibration")), detail)


def placeholder_scheduler(results=None) -> Answer:
    """01: one decode step's encoder scheduling at the PR's shape, per placeholder and strategy."""
    results = recorded(results)
    step = pick(results, "mm_decode_step", where=lambda rows: row(rows, combo="tensor+loop") and row(rows, combo="list+loop"))
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
    """06: how many results each machine recorded, and the one host figure every machine has (the
    calibration's tensor index + ``int()``)."""
    results = recorded(results)
    if not results:
        return Answer(NO_RESULT.format(what="result", how="run `make report` on a machine"))
    machines = sorted({r.slug for r in results})
    gpu = sorted({r.slug for r in results if r.source == "measured-gpu"})
    text = (f"{num(len(results))} recorded results from {num(len(machines))} machines "
            f"({esc(', '.join(machines))}); {num(sum(r.source == 'measured-gpu' for r in results))} of them measured "
            f"on a GPU ({esc(', '.join(gpu) or 'none yet')}).")
    costs = [(r.slug, _calibration_costs(r).get("tensor_index_int")) for r in of_name(results, "calibration")]
    costs = [(m, v) for m, v in costs if v]
    detail = ""
    if len(costs) > 1:
        fast, slow = min(costs, key=lambda c: c[1]), max(costs, key=lambda c: c[1])
        text += (f" The host loop every machine times (one tensor index + <code>int()</code>) ranges from "
                 f"{num(fast[1] / 1e3, ' us')} on {esc(fast[0])} to {num(slow[1] / 1e3, ' us')} on {esc(slow[0])} "
                 f"({num(slow[1] / fast[1], 'x')}), each measured on that machine's own CPU.")
        detail = bars_html([(m, v / 1e3) for m, v in costs], "us", log=False,
                           caption="tensor index + int() per call, calibration")
    return Answer(text, tuple(cite(r) for r in of_name(results, "calibration")), detail)
