"""A fixed host cost model for the simulated device: deterministic runs, no wall clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from labkit.engine.device.devices import FROZEN_CLOCK, SimDevice
from labkit.engine.device.profiles import DeviceProfile


@dataclass(frozen=True)
class FixedHostCosts:
    """Host time per engine step phase, in ns.

    ``schedule_ns``: keyed ``"placeholder/scheduling"`` (e.g. ``"tensor/loop"``), or by
    placeholder alone, or ``"*"`` (looked up in that order); ``prepare_ns``: input metadata and
    prefix-range bookkeeping per step (the copies themselves cost what the profile says);
    ``range_copy_ns``: host work before each prefix-range copy (a small host tensor built per
    sequence, before the runtime call), paid wherever the strategy copies.
    """

    schedule_ns: Mapping[str, float] = field(default_factory=lambda: {"*": 0.0})
    prepare_ns: float = 0.0
    range_copy_ns: float = 0.0

    def schedule_cost(self, placeholder: str, scheduling: str) -> float:
        """Host ns of one ``schedule()`` for a placeholder variant and scheduling strategy."""
        for key in (f"{placeholder}/{scheduling}", placeholder, "*"):
            if key in self.schedule_ns:
                return float(self.schedule_ns[key])
        raise KeyError(f"no schedule cost for {placeholder}/{scheduling} (and no '*' default)")


def make_fixed_cost_device(profile: DeviceProfile | None = None, *, record: bool = False) -> SimDevice:
    """A ``SimDevice`` whose host clock never moves (use with an engine given ``FixedHostCosts``)."""
    return SimDevice(profile, clock=FROZEN_CLOCK, record=record)
