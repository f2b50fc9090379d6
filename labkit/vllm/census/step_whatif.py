"""Does ``labkit whatif`` on the baseline's vLLM trace predict the merged step? (``labkit bench vllm-step --whatif-check``)

More: docs/reference.md, ``labkit.vllm.census.step_whatif``.
"""

from __future__ import annotations

from pathlib import Path

from labkit.errors import UsageError

__all__ = ["DEFAULT_CHANGE", "TOLERANCE", "check_whatif", "main_check"]

DEFAULT_CHANGE = r"_try_schedule_encoder_inputs$=0"
TOLERANCE = 0.10


def _engine_step_ms(path) -> float | None:
    from labkit.trace.analysis.host.engine_steps import engine_phase_table
    from labkit.trace.read.load import load_trace

    table = engine_phase_table(load_trace(path))
    return float(table["dur_us"].median()) / 1e3 if len(table) else None


def check_whatif(baseline, merged, *, change: str = DEFAULT_CHANGE, tolerance: float = TOLERANCE) -> dict:
    """Whether ``labkit whatif`` on the baseline's trace predicts the merged step within ``tolerance``."""
    from labkit.trace.whatif.predict import parse_changes, predict

    for p in (baseline, merged):
        if not Path(p).is_file():
            raise UsageError(f"no such trace file: {p}")
    out = {"baseline_trace": str(baseline), "merged_trace": str(merged), "change": f"--scale {change}",
           "tolerance": tolerance, "baseline_engine_step_ms": _engine_step_ms(baseline),
           "merged_engine_step_ms": _engine_step_ms(merged)}
    try:
        changes = parse_changes([change], [], [])
        w = predict(str(baseline), changes)
        m = predict(str(merged), [])
    except (UsageError, RuntimeError, ValueError, KeyError, NotImplementedError) as exc:
        out.update(passed=False, whatif_error=f"{type(exc).__name__}: {exc}")
        return out
    pred, meas = w.predicted.get("step_ms_median"), m.measured.get("step_ms_median")
    err = pred / meas - 1 if pred and meas else None
    out.update(predicted_step_ms=pred, baseline_step_ms=w.measured.get("step_ms_median"), merged_step_ms=meas,
               error=err, passed=err is not None and abs(err) <= tolerance, replay_check=w.replay_check,
               whatif_notes=list(w.notes) + [f"merged: {n}" for n in m.notes], warnings=list(w.warnings))
    return out


def main_check(baseline, merged, args) -> int:
    """CLI body of ``--whatif-check``: print the check, write it with ``--json``; exit 0 when it holds, 1 if not."""
    res = check_whatif(baseline, merged)
    if "whatif_error" in res:
        print(f"labkit whatif could not replay the baseline trace: {res['whatif_error']}")
    else:
        print(f"whatif {res['change']} on {Path(baseline).name}: predicted step {res['predicted_step_ms']:.2f} ms "
              f"(baseline measured {res['baseline_step_ms']:.2f} ms); merged measured {res['merged_step_ms']:.2f} ms "
              f"({100 * res['error']:+.1f}%, tolerance {100 * res['tolerance']:.0f}%): "
              f"{'ok' if res['passed'] else 'FAIL'}")
    if getattr(args, "json", None):
        from labkit.fileio import write_json

        write_json(args.json, res)
        print(f"wrote {args.json}")
    return 0 if res["passed"] else 1
