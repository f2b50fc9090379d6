"""The engine's A/B pairs the what-if is checked against: which variants, and their trace folders.

Each ``AB_CASES`` entry is a pair of engine variants that differ in one thing (#40143's placeholder
reads, #38794's prefix-range copies); ``variant_dir`` names the trace folder the engine writes for a
variant. Shared by the check on measured pairs (``labkit.trace.whatif.ab_pairs``) and their recording
on the simulated device (``labkit.trace.whatif.sim_pairs``); imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ABCase", "AB_CASES", "variant_dir", "base_case"]


@dataclass(frozen=True)
class ABCase:
    """A before/after pair of engine variants (``(placeholder, scheduling, prefix_ranges)``)."""

    name: str
    before: tuple
    after: tuple
    what: str  #: the difference, in words


AB_CASES = {
    "tensor->list": ABCase("tensor->list", ("tensor", "loop", "none"), ("list", "loop", "none"),
                           "placeholder reads from a Python list instead of a tensor (#40143)"),
    "per_layer->per_step": ABCase("per_layer->per_step", ("fast", "cursor", "per_layer"),
                                  ("fast", "cursor", "per_step"),
                                  "the prefix-range copies made once per step instead of per row and layer (#38794)"),
}


def variant_dir(v: tuple, async_scheduling: bool = True) -> str:
    """The trace folder name the engine writes for a variant, e.g. ``tensor-loop-none-async``."""
    return "-".join([*v, "async" if async_scheduling else "sync"])


def base_case(case: str) -> ABCase:
    """The ``AB_CASES`` entry of ``case`` (a simulated pair's name may end in ``/<cudagraph mode>``)."""
    return AB_CASES[case.split("/")[0]]
