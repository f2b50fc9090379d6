"""The bubble model: how host time per step turns into step time, TPOT and throughput.

One engine step needs ``host_ms`` of CPU work (scheduling, input preparation) and
``device_ms`` of GPU work. Without overlap (synchronous scheduling) they add up; with
async scheduling the host plans step N+1 while the GPU runs step N, so a step costs
``max(host_ms, device_ms) + non_overlap_ms`` where ``non_overlap_ms`` is the part that
cannot hide (handing the batch over, reading back sampled tokens). When the host is the
longer of the two, the GPU idles ``host_ms - device_ms`` per step: the bubble #40143 removed.

In steady decode every running request gets one token per step, so TPOT = step time and
output throughput = batch size / step time.

:func:`compare_with_published` asks whether a measured per-step host saving explains a
published before/after result (by default #40143's: mean TPOT 33.81 -> 24.58 ms, output
2478.5 -> 3146.8 tok/s), inferring the device and host time per step the numbers imply.

:func:`graph_device_step` takes the device step from the lab's own engine instead, from a run
under CUDA graphs (vLLM's regime, where the device time of a step is not hidden behind launch
overhead) when one is recorded: measured on a GPU first, then simulated.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from labkit.errors import UsageError

__all__ = [
    "MODES",
    "PublishedResult",
    "PR40143",
    "StepPrediction",
    "predict_step",
    "sweep_host_time",
    "PublishedComparison",
    "compare_with_published",
    "DeviceStep",
    "device_step_ms",
    "graph_device_step",
]

MODES = ("sync", "async")


@dataclass(frozen=True)
class PublishedResult:
    """A published before/after serving benchmark (times in ms, throughput in output tokens/s)."""

    name: str
    batch_size: int
    mean_tpot_ms_before: float
    mean_tpot_ms_after: float
    output_tok_s_before: float
    output_tok_s_after: float
    duration_s_before: float
    duration_s_after: float

    @property
    def tpot_saving_ms(self) -> float:
        return self.mean_tpot_ms_before - self.mean_tpot_ms_after

    @property
    def throughput_gain(self) -> float:
        return self.output_tok_s_after / self.output_tok_s_before


#: vLLM #40143 on Gemma-4-E4B, 128 concurrent requests x 32 images of 1024x1536
PR40143 = PublishedResult(
    name="vllm#40143 Gemma-4-E4B c=128 x 32 images",
    batch_size=128,
    mean_tpot_ms_before=33.81,
    mean_tpot_ms_after=24.58,
    output_tok_s_before=2478.5,
    output_tok_s_after=3146.8,
    duration_s_before=413.16,
    duration_s_after=325.41,
)


@dataclass(frozen=True)
class StepPrediction:
    """Predicted decode step. ``bubble_ms`` is GPU idle time per step; ``host_bound`` whether the host sets the pace."""

    mode: str
    host_ms: float
    device_ms: float
    non_overlap_ms: float
    batch_size: int
    step_ms: float
    tpot_ms: float
    output_tok_s: float
    bubble_ms: float
    host_bound: bool

    def as_row(self) -> dict:
        return asdict(self)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise UsageError(f"unknown overlap mode {mode!r}: use sync or async")


def predict_step(host_ms: float, device_ms: float, batch_size: int = 1, *, mode: str = "async",
                 non_overlap_ms: float = 0.0) -> StepPrediction:
    """Step time (ms), TPOT (ms), output tokens/s and GPU bubble (ms) of one decode step.

    ``mode="sync"``: host + device (+ non-overlap); ``"async"``: max(host, device) + non-overlap.
    """
    _check_mode(mode)
    if host_ms < 0 or device_ms < 0 or non_overlap_ms < 0 or batch_size < 1:
        raise UsageError("times must be >= 0 and batch_size >= 1")
    if mode == "sync":
        step = host_ms + device_ms + non_overlap_ms
        host_bound = host_ms > 0
    else:
        step = max(host_ms, device_ms) + non_overlap_ms
        host_bound = host_ms > device_ms
    return StepPrediction(
        mode=mode, host_ms=host_ms, device_ms=device_ms, non_overlap_ms=non_overlap_ms,
        batch_size=batch_size, step_ms=step, tpot_ms=step,
        output_tok_s=batch_size * 1e3 / step if step > 0 else float("inf"),
        bubble_ms=step - device_ms, host_bound=host_bound,
    )


def sweep_host_time(host_ms_values, device_ms: float, batch_size: int = 1, *,
                    non_overlap_ms: float = 0.0, modes=MODES) -> list[dict]:
    """Tidy rows (one per mode x host time) of :func:`predict_step` for a plot of step time vs host time."""
    return [predict_step(h, device_ms, batch_size, mode=m, non_overlap_ms=non_overlap_ms).as_row()
            for m in modes for h in host_ms_values]


@dataclass(frozen=True)
class PublishedComparison:
    """Does a host saving per step explain a published result? (all times in ms per decode step)

    Async inference: the post-change run is taken as device-bound (device time =
    published TPOT after - non-overlap) and the pre-change run as host-bound (host time =
    published TPOT before - non-overlap). Sync model: TPOT falls by the saving itself.
    ``explained_fraction`` = saving / published TPOT saving. Error = predicted - published.
    """

    published: str
    host_saving_ms: float
    host_scale: float
    non_overlap_ms: float
    published_tpot_before_ms: float
    published_tpot_after_ms: float
    published_tpot_saving_ms: float
    implied_device_ms: float
    implied_host_before_ms: float
    implied_host_after_ms: float
    predicted_tpot_after_async_ms: float
    predicted_tpot_after_sync_ms: float
    error_async_ms: float
    error_async_pct: float
    error_sync_ms: float
    explained_fraction: float
    published_output_tok_s_after: float
    predicted_output_tok_s_after: float
    published_throughput_gain: float
    predicted_throughput_gain: float

    def as_row(self) -> dict:
        return asdict(self)

    def as_rows(self) -> list[dict]:
        """Long table: ``quantity``, ``published``, ``predicted`` (ms or tok/s), ``error_pct``."""
        def row(q, pub, pred):
            return {"quantity": q, "published": pub, "predicted": pred,
                    "error_pct": None if pub in (None, 0) or pred is None else 100.0 * (pred - pub) / pub}
        return [
            row("tpot_before_ms", self.published_tpot_before_ms, self.published_tpot_before_ms),
            row("tpot_after_ms (async)", self.published_tpot_after_ms, self.predicted_tpot_after_async_ms),
            row("tpot_after_ms (sync)", self.published_tpot_after_ms, self.predicted_tpot_after_sync_ms),
            row("tpot_saving_ms", self.published_tpot_saving_ms, self.host_saving_ms),
            row("output_tok_s_after", self.published_output_tok_s_after, self.predicted_output_tok_s_after),
            row("throughput_gain", self.published_throughput_gain, self.predicted_throughput_gain),
        ]


def compare_with_published(host_saving_ms: float, *, published: PublishedResult = PR40143,
                           non_overlap_ms: float = 1.0, host_scale: float = 1.0) -> PublishedComparison:
    """Predict the published "after" TPOT from a measured host saving per decode step.

    Args:
        host_saving_ms: host time per decode step removed by the change, as measured (ms).
        published: the before/after result to explain.
        non_overlap_ms: per-step time that never overlaps (ms), assumed equal before and after.
        host_scale: how much slower (>1) or faster (<1) the published machine's host is than
            the measuring one; the saving is multiplied by it.
    """
    if host_saving_ms < 0 or host_scale <= 0 or non_overlap_ms < 0:
        raise UsageError("host_saving_ms and non_overlap_ms must be >= 0, host_scale > 0")
    p = published
    if non_overlap_ms >= p.mean_tpot_ms_after:
        raise UsageError(f"non_overlap_ms must be below the published TPOT after ({p.mean_tpot_ms_after} ms)")
    saving = host_saving_ms * host_scale
    device = p.mean_tpot_ms_after - non_overlap_ms
    host_before = p.mean_tpot_ms_before - non_overlap_ms
    host_after = max(host_before - saving, 0.0)
    pred_async = max(host_after, device) + non_overlap_ms
    pred_sync = max(p.mean_tpot_ms_before - saving, non_overlap_ms)
    # duration (and so throughput) scales with TPOT in a decode-dominated run
    pred_tok_s = p.output_tok_s_before * p.mean_tpot_ms_before / pred_async
    return PublishedComparison(
        published=p.name,
        host_saving_ms=saving,
        host_scale=host_scale,
        non_overlap_ms=non_overlap_ms,
        published_tpot_before_ms=p.mean_tpot_ms_before,
        published_tpot_after_ms=p.mean_tpot_ms_after,
        published_tpot_saving_ms=p.tpot_saving_ms,
        implied_device_ms=device,
        implied_host_before_ms=host_before,
        implied_host_after_ms=host_after,
        predicted_tpot_after_async_ms=pred_async,
        predicted_tpot_after_sync_ms=pred_sync,
        error_async_ms=pred_async - p.mean_tpot_ms_after,
        error_async_pct=100.0 * (pred_async - p.mean_tpot_ms_after) / p.mean_tpot_ms_after,
        error_sync_ms=pred_sync - p.mean_tpot_ms_after,
        explained_fraction=saving / p.tpot_saving_ms,
        published_output_tok_s_after=p.output_tok_s_after,
        predicted_output_tok_s_after=pred_tok_s,
        published_throughput_gain=p.throughput_gain,
        predicted_throughput_gain=pred_tok_s / p.output_tok_s_before,
    )


@dataclass(frozen=True)
class DeviceStep:
    """A device time per decode step (ms) and where it comes from.

    ``source``: ``measured-gpu``, ``simulated`` or ``published`` (implied by the PR's table);
    ``origin``: result name, machine, variant and CUDA-graph mode, or the fallback's reason.
    """

    device_ms: float
    source: str
    origin: str


def device_step_ms(row: dict) -> float | None:
    """Device busy time per step (ms) of one ``labkit bench engine`` row, or None if unknown.

    Simulated rows carry it (``device_busy_per_step_ns``); measured rows give it as the median
    step times the busy share of their profiled steps (``1 - device_idle_frac``).
    """
    if row.get("device_busy_per_step_ns") is not None:
        return float(row["device_busy_per_step_ns"]) / 1e6
    idle = row.get("device_idle_frac")
    if idle is None or row.get("median_ns") is None:
        return None
    return float(row["median_ns"]) / 1e6 * (1.0 - float(idle))


#: preferred variants for the device step: the after-fix ones (no host work inside the forward)
_PREFERRED = ("fast/cursor/none/async", "list/loop/none/async", "fast/cursor/cached/async")


def graph_device_step(results, fallback_ms: float, *, fallback_origin: str = "implied by the published TPOT after",
                      include_quick: bool = False) -> DeviceStep:
    """The device step (ms) of a recorded graph-mode engine run, else ``fallback_ms``.

    ``results``: ``labkit.results.BenchResult`` objects of engine runs (any machines); quick-size
    runs (never committed) only count with ``include_quick``. Rows run with a full graph
    (``cudagraph_run == "full"``) are preferred over piecewise ones, measured GPUs over simulated
    runs, and the after-fix variants over the others.
    """
    best = None
    for res in results:
        if not include_quick and getattr(res, "size", None) == "quick":
            continue
        for row in res.rows:
            run = row.get("cudagraph_run")
            ms = device_step_ms(row)
            if run not in ("full", "piecewise") or ms is None or ms <= 0:
                continue
            base = row.get("variant", "").rsplit("/", 1)[0] if row.get("cudagraph", "none") != "none" else ""
            rank = (run == "full", res.source == "measured-gpu", base in _PREFERRED,
                    -_PREFERRED.index(base) if base in _PREFERRED else -len(_PREFERRED))
            if best is None or rank > best[0]:
                machine = (res.machine or {}).get("slug") or (res.machine or {}).get("gpu_name") or "?"
                origin = f"{res.name} on {machine}: {row.get('variant')} ({run} graph)"
                best = (rank, DeviceStep(ms, res.source, origin))
    if best is None:
        return DeviceStep(float(fallback_ms), "published", fallback_origin)
    return best[1]
