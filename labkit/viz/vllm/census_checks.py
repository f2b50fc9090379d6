"""The step census's checks as a reader takes them: invariants in one line each, observations as findings.

The census (:mod:`labkit.vllm.census.step_checks`) records every check with ``passed`` and its
figures. A check's name says its kind (:data:`CHECK_KINDS`): an invariant must hold (red with
its failing points when it does not); an observation's gap is stated as a finding, never as a
failure.

More: docs/reference.md, ``labkit.viz.vllm.census_checks``.
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass

from labkit.bench import sig3
from labkit.viz.labels import bars_html

INVARIANT, OBSERVATION = "invariant", "observation"


@dataclass(frozen=True)
class Observation:
    """How an observation check reads: the saving measured (``value``) against the reference
    (``ref``), both row keys in us, what each is, and why they may differ."""

    value: str
    ref: str
    what: str  # the finding, ``{x}`` standing for the median ratio
    reason: str


#: observation checks by name; every other check is an invariant
OBSERVATIONS: dict[str, Observation] = {
    "schedule saving matches the scheduler alone": Observation(
        "census_us", "scheduler_only_us", "inside the engine step the schedule saving is {x} the stand-in scheduler's alone",
        "inside a step the rest of the step (on a CPU, the forward above all) evicts the scheduler's data from the "
        "caches between two schedule() calls, and the stand-in reads requests of its own"),
    "schedule saving with the forward off the host matches the scheduler alone": Observation(
        "off_host_us", "scheduler_only_us",
        "in steps with the forward off the host the schedule saving is {x} the stand-in scheduler's alone",
        "input preparation and output processing still pass through the host's caches, and the stand-in "
        "reads requests of its own"),
    "schedule saving with the forward off the host matches the engine's scheduler alone": Observation(
        "off_host_us", "alone_us",
        "in steps with the forward off the host the schedule saving is {x} the engine's scheduler's alone, back to back",
        "what is left of the step between two schedule() calls still evicts part of the scheduler's data"),
    "the engine's scheduler alone matches the stand-in": Observation(
        "alone_us", "scheduler_only_us", "the engine's scheduler alone saves {x} what the stand-in saves, both back to back",
        "the two read different requests: the engine's are built among everything else it allocates"),
    "schedule saving lies between the scheduler alone, warm and swept": Observation(
        "census_us", "alone_us", "inside the engine step the schedule saving is {x} the engine's scheduler's alone, back to back",
        "a step's saving lies between its scheduler's warm and cache-swept figures where the rest of the step "
        "evicts part of its data"),
}

CHECK_KINDS: dict[str, str] = {name: OBSERVATION for name in OBSERVATIONS}


def kind_of(check: str) -> str:
    """``observation`` for a check listed in :data:`OBSERVATIONS`, ``invariant`` otherwise."""
    return CHECK_KINDS.get(check, INVARIANT)


def _where(c: dict) -> str:
    return f"{c.get('num_requests')} x {c.get('images')}, {c.get('variant')}"


def _invariant_line(name: str, checks: list[dict]) -> str:
    failed = [c for c in checks if not c["passed"]]
    if not failed:
        where = "its one point" if len(checks) == 1 else f"all {len(checks)} points and variants"
        return f'<div style="color:#1b7f3a">&#10003; <b>{html.escape(name)}</b>: holds at {where}</div>'
    lines = "".join(f"<li>{html.escape(_where(c))}: {html.escape(str(c.get('detail', '')))}</li>" for c in failed)
    return (f'<div style="color:#b00020">&#10007; <b>{html.escape(name)}</b>: does not hold at {len(failed)} of '
            f"{len(checks)} points and variants"
            f"<details><summary>where, and the figures compared</summary><ul>{lines}</ul></details></div>")


def _observation_block(name: str, checks: list[dict]) -> str:
    obs = OBSERVATIONS[name]
    pairs = [(c, c[obs.value] / c[obs.ref]) for c in checks
             if isinstance(c.get(obs.value), (int, float)) and isinstance(c.get(obs.ref), (int, float)) and c[obs.ref]]
    held = sum(bool(c["passed"]) for c in checks)
    if pairs:
        ratios = [r for _, r in pairs]
        what = html.escape(obs.what[0].upper() + obs.what[1:]).replace("{x}", f"<b>{sig3(statistics.median(ratios))}x</b>")
        finding = (f"{what} (median of {len(pairs)} points, {sig3(min(ratios))}x to {sig3(max(ratios))}x); "
                   f"within the check's tolerance at {held} of {len(checks)}. Why they can differ: "
                   f"{html.escape(obs.reason)}.")
        figure = bars_html([(f"{c['num_requests']} x {c['images']}", r) for c, r in pairs], "x", log=False,
                           caption=f"{obs.value.removesuffix('_us')} / {obs.ref.removesuffix('_us')}, per point")
    else:
        finding, figure = f"recorded at {len(checks)} points, within the check's tolerance at {held}.", ""
    lines = "".join(f"<li>{html.escape(_where(c))}: {html.escape(str(c.get('detail', '')))}</li>" for c in checks)
    return (f'<div style="margin:6px 0"><b>{html.escape(name)}</b> (observation)<div>{finding}</div>{figure}'
            f"<details><summary>every point's figures</summary><ul>{lines}</ul></details></div>")


@dataclass(frozen=True)
class ChecksView:
    """The census's checks as HTML (``_repr_html_``): invariants first, then observations."""

    invariants: tuple[str, ...]
    observations: tuple[str, ...]

    def _repr_html_(self) -> str:
        if not self.invariants and not self.observations:
            return "<p>the recorded census holds no checks</p>"
        out = '<div class="labkit-checks" style="font-family:sans-serif;font-size:13px">'
        if self.invariants:
            out += "<div><b>Invariants</b> (the census is read only where these hold)</div>" + "".join(self.invariants)
        if self.observations:
            out += ('<div style="margin-top:8px"><b>Observations</b> (the schedule saving measured two ways; '
                    "a gap between them is a finding)</div>" + "".join(self.observations))
        return out + "</div>"


def checks_view(result) -> ChecksView:
    """The checks recorded in a census result's ``params['checks']``, grouped by name in the order first
    recorded, each under its full name."""
    checks = (result.params.get("checks") or []) if result is not None else []
    by: dict[str, list[dict]] = {}
    for c in checks:
        by.setdefault(c["check"], []).append(c)
    inv = tuple(_invariant_line(n, cs) for n, cs in by.items() if kind_of(n) == INVARIANT)
    obs = tuple(_observation_block(n, cs) for n, cs in by.items() if kind_of(n) == OBSERVATION)
    return ChecksView(inv, obs)
