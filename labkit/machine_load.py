"""What else the machine ran while a measurement ran: ``with machine_load() as load: ...``.

Timings on a shared machine move with what its other processes do: a census recorded while
something else kept a core busy is slower throughout, and two recordings of the same code can
differ by half. Ratios within one run cancel most of that; figures compared across runs do not.
So the real-engine benchmarks record, beside their figures, how busy the machine was.

More: docs/reference.md, ``labkit.machine_load``.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from typing import Callable, Iterator

__all__ = ["read_cpu_jiffies", "own_cpu_s", "machine_load", "describe_load"]

#: fields of /proc/stat's cpu line, in order (guest time is counted in user already)
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_BUSY = ("user", "nice", "system", "irq", "softirq")


def read_cpu_jiffies(text: str) -> dict:
    """The all-CPU line of ``/proc/stat`` (``text``) as ``{field: jiffies}``; ``ValueError`` if absent."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(x) for x in parts[1:1 + len(_FIELDS)]]
            return dict(zip(_FIELDS, values + [0] * (len(_FIELDS) - len(values))))
    raise ValueError("no 'cpu' line in /proc/stat")


def own_cpu_s() -> float:
    """This process's CPU time so far, user and system, with its waited-for children (s)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


@contextlib.contextmanager
def machine_load(stat_path: str = "/proc/stat", *, cpus: int | None = None, hz: int | None = None,
                 read: Callable[[str], str] = _read, own: Callable[[], float] = own_cpu_s,
                 clock: Callable[[], float] = time.monotonic) -> Iterator[dict]:
    """Yields a dict filled when the block ends: ``wall_s``, ``cpus``, ``others_frac``, ``steal_frac``,
    ``own_frac`` (see the module text) and ``note``. ``cpus`` defaults to ``os.cpu_count()``, ``hz`` to
    the kernel's clock ticks per second; ``read``, ``own`` and ``clock`` are there for tests."""
    cpus = cpus or os.cpu_count() or 1
    hz = hz or os.sysconf("SC_CLK_TCK")
    out: dict = {"wall_s": None, "cpus": cpus, "others_frac": None, "steal_frac": None, "own_frac": None,
                 "note": None}
    try:
        before = read_cpu_jiffies(read(stat_path))
    except (OSError, ValueError) as exc:
        before = None
        out["note"] = f"{stat_path} unreadable ({exc.__class__.__name__}): machine load not recorded"
    t0, own0 = clock(), own()
    try:
        yield out
    finally:
        wall, spent = clock() - t0, own() - own0
        out["wall_s"] = wall
        after = None
        if before is not None:
            try:
                after = read_cpu_jiffies(read(stat_path))
            except (OSError, ValueError) as exc:
                out["note"] = f"{stat_path} unreadable ({exc.__class__.__name__}): machine load not recorded"
        if before is not None and after is not None and wall > 0:
            capacity = wall * cpus
            busy = sum(after[k] - before[k] for k in _BUSY) / hz
            out.update(others_frac=max(0.0, busy - spent) / capacity,
                       steal_frac=(after["steal"] - before["steal"]) / hz / capacity, own_frac=spent / capacity,
                       note="/proc/stat busy jiffies less this process's CPU time, over wall x CPUs")


def describe_load(load: dict | None) -> str:
    """One line for a result's ``machine_load``: the other processes' and the hypervisor's shares."""
    if not load or load.get("others_frac") is None:
        return "machine load not recorded" + (f" ({load['note']})" if load and load.get("note") else "")
    return (f"while it ran, other processes used {100 * load['others_frac']:.0f}% of the machine's "
            f"{load['cpus']} CPUs and the hypervisor took {100 * load['steal_frac']:.0f}% "
            f"(this run {100 * load['own_frac']:.0f}%, {load['wall_s']:.0f} s)")
