"""A fixed host cost model for the simulated device: deterministic runs, no wall clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from labkit.engine.device.devices import FROZEN_CLOCK, SimDevice
from labkit.engine.device.profiles import DeviceProfile


@dataclass(frozen=True)
class FixedHostCosts:
    """Host time per engine step phase, in ns (keys and lookup order: docs/reference.md)."""

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
