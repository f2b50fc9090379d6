"""The two fits of ``labkit bench serve-sim --fit``, each one parameter against the after arm's
published mean TPOT: the device-time factor (:func:`fit_device_scale`) and the host time per
request per step (:func:`fit_host_per_request`). Each takes ``tpot_at(x) -> ms``, one simulated
run of the after arm, and returns the parameter with every run it tried."""

from __future__ import annotations

from labkit.errors import UsageError

__all__ = ["FIT_TOLERANCE", "FIT_MAX_RUNS", "HOST_FIT_TOLERANCE", "HOST_FIT_MAX_RUNS", "fit_device_scale",
           "fit_host_per_request"]


#: the device-scale fit stops when the after arm's mean TPOT is within this of the published one
FIT_TOLERANCE = 0.005
#: and after at most this many runs of the after arm
FIT_MAX_RUNS = 8


def fit_device_scale(tpot_at, published_tpot_ms: float, *, tolerance: float = FIT_TOLERANCE,
                     max_runs: int = FIT_MAX_RUNS) -> tuple[float, list]:
    """The one fitted parameter of ``--fit device-scale``: the factor on every step's device time at
    which the after arm's mean TPOT (``tpot_at(scale) -> ms``, one simulated run) is the published
    one. Not a closed form: a slower device changes the run itself (more requests decode at once,
    so longer steps), so the TPOT is not proportional to the factor. Secant steps from 1 (the
    first guess ``published / predicted``), until within ``tolerance``; returns ``(scale, [(scale,
    tpot ms), ...])`` for every run. Raises :class:`UsageError` where a run gives no positive TPOT
    or the runs end without meeting the tolerance."""
    if not published_tpot_ms or published_tpot_ms <= 0:
        raise UsageError("--fit device-scale: needs a positive published mean TPOT")
    tried = []

    def run(scale: float) -> float:
        t = tpot_at(scale)
        if not t or t <= 0:
            raise UsageError(f"--fit device-scale: the after arm gave no positive mean TPOT at scale {scale:g}")
        tried.append((scale, t))
        return t

    s0, t0 = 1.0, run(1.0)
    s1 = s0 * published_tpot_ms / t0
    while True:
        if abs(t0 - published_tpot_ms) <= tolerance * published_tpot_ms:
            return s0, tried
        if len(tried) >= max_runs:
            raise UsageError(f"--fit device-scale: no scale within {tolerance:.1%} of the published mean TPOT "
                             f"after {len(tried)} runs ({', '.join(f'{a:.3f}: {b:.2f} ms' for a, b in tried)})")
        t1 = run(s1)
        if abs(t1 - published_tpot_ms) <= tolerance * published_tpot_ms:
            return s1, tried
        slope = (t1 - t0) / (s1 - s0) if s1 != s0 else 0.0
        s_next = s1 + (published_tpot_ms - t1) / slope if slope > 0 else s1 * published_tpot_ms / t1
        s0, t0, s1 = s1, t1, max(s_next, 1e-3)


#: the host fit: TPOT within this of the published ends it (a host-bound run's TPOT moves with the
#: scheduler's cost measured live in it, about a percent or two from run to run on a 2-core machine)
HOST_FIT_TOLERANCE = 0.01
HOST_FIT_MAX_RUNS = 6


def _least_squares_root(points: list, target: float) -> float | None:
    """Where the least-squares line through ``points`` ``[(x, y)]`` reaches ``target`` (None: no rising line)."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return mx + (target - my) / slope if slope > 0 else None


def fit_host_per_request(tpot_at, published_tpot_ms: float, *, first_guess_ns: float, requests: int,
                         tolerance: float = HOST_FIT_TOLERANCE, max_runs: int = HOST_FIT_MAX_RUNS,
                         floor_ms: float | None = None) -> tuple[float, list]:
    """The one fitted parameter of ``--fit host-per-request``: the host time per request per step
    (ns) added to the engine core's serial chain at which the after arm's mean TPOT
    (``tpot_at(ns) -> ms``, one simulated run) is the published one. The first run is at
    ``first_guess_ns`` (what the after arm's pure-decode host lacks of the published TPOT, per
    request). While the TPOT has not left ``floor_ms`` (the run without it: the device is the
    longer side) the next run adds the TPOT still missing spread over ``requests`` (a full step's);
    after that, the next run is where the least-squares line through the runs above the floor
    reaches the published TPOT (runs of one x differ by the scheduler's live cost, so no secant).
    Ends at a run within ``tolerance``, or after ``max_runs`` at the last line's root. Returns
    ``(ns, [(ns, tpot ms), ...])``; :class:`UsageError` where a run gives no positive TPOT or the
    runs never leave the floor."""
    if not published_tpot_ms or published_tpot_ms <= 0:
        raise UsageError("--fit host-per-request: needs a positive published mean TPOT")
    if requests < 1:
        raise UsageError("--fit host-per-request: needs at least one request")
    per_ms = 1e6 / requests  # ns per request that lengthen a full step by 1 ms
    tried: list = []

    def above(points):
        return [(x, t) for x, t in points if floor_ms is None or t > floor_ms * (1 + tolerance)]

    x = max(0.0, first_guess_ns)
    while True:
        t = tpot_at(x)
        if not t or t <= 0:
            raise UsageError(f"--fit host-per-request: the after arm gave no positive mean TPOT at {x:g} ns")
        tried.append((x, t))
        if abs(t - published_tpot_ms) <= tolerance * published_tpot_ms:
            return x, tried
        root = _least_squares_root(above(tried), published_tpot_ms)
        if len(tried) >= max_runs:
            if root is None:
                raise UsageError(f"--fit host-per-request: the TPOT does not rise with the host after {len(tried)} "
                                 f"runs ({', '.join(f'{a:.0f} ns: {b:.2f} ms' for a, b in tried)})")
            return max(0.0, root), tried
        x = max(0.0, root if root is not None else x + (published_tpot_ms - t) * per_ms)
