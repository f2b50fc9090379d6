"""What a row of the step census names: its phases, the scheduler-alone modes, the off-host prefix.

Shared by the census (:mod:`labkit.vllm.census.step_census`), its checks
(:mod:`labkit.vllm.census.step_checks`) and what reads its rows (``labkit bench vllm-step``'s table,
``labkit bench engine --host-from``, notebook 08); :func:`step_quantiles` is the figures every
timed row carries. Imports neither side.
"""

from __future__ import annotations

import statistics
from typing import Sequence

__all__ = ["PHASES", "TOP", "ALONE_MODES", "OFF_HOST", "step_quantiles"]

#: every phase a row is written for: (phase, parent); top-level ones have no parent
PHASES = (("step", None), ("schedule", None), ("prepare_inputs", None), ("encoder", None), ("forward", None),
          ("sample", None), ("update_from_output", None), ("process_outputs", None), ("other", None),
          ("encoder_inputs", "schedule"), ("get_num_embeds", "encoder_inputs"), ("update_states", "prepare_inputs"),
          ("prepare_inputs_fn", "prepare_inputs"), ("attention_metadata", "prepare_inputs"),
          ("preprocess", "prepare_inputs"), ("model_forward", "forward"), ("logits", "forward"),
          ("sampler", "sample"), ("bookkeeping", "sample"), ("detokenize", "process_outputs"))
TOP = ("schedule", "prepare_inputs", "encoder", "forward", "sample", "update_from_output", "process_outputs")
#: the engine's own scheduler driven alone after a point's steps (:func:`labkit.vllm.census.step_checks.engine_scheduler_alone`):
#: row phase -> whether the last-level cache is swept between its steps
ALONE_MODES = {"schedule_alone": False, "schedule_alone_swept": True}
#: prefix of the phases of the steps timed with the forward off the host (:func:`labkit.vllm.census.step_census.forward_off_host`)
OFF_HOST = "off_host:"


def step_quantiles(values: Sequence[float]) -> dict:
    """``median_us`` and the nearest-rank ``p20_us`` / ``p80_us`` of per-step values (us)."""
    v = sorted(values)

    def q(p):
        return float(v[min(len(v) - 1, int(round(p * (len(v) - 1))))])

    return {"median_us": float(statistics.median(v)), "p20_us": q(0.2), "p80_us": q(0.8)}
