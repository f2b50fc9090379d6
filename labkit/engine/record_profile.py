"""Recording a simulated-device profile on a real GPU: per-op device durations and runtime costs.

More: docs/reference.md, ``labkit.engine.record_profile``.
"""

from __future__ import annotations

import datetime as _dt

import numpy as np

from labkit.engine.device.devices import TorchDevice
from labkit.engine.model import make_batch
from labkit.engine.model import HEAD_OPS, LAYER_OPS, TAIL_OPS, TransformerStack
from labkit.engine.device.profiles import CopyCost, DeviceProfile, OpCost, copy_cost_from_two_sizes, fit_op_costs
from labkit.timing import time_host


def default_shapes(num_seqs: int, context: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(q_lens, kv_lens)`` arrays: decode at two batch sizes and two contexts, and one prefill chunk."""
    half = max(1, num_seqs // 2)
    shapes = [(np.ones(b, dtype=np.int64), np.full(b, ctx, dtype=np.int64))
              for b, ctx in ((num_seqs, context), (half, context), (num_seqs, max(64, context // 2)))]
    chunk = 512
    b = max(1, min(8, num_seqs))
    shapes.append((np.full(b, chunk, dtype=np.int64), np.full(b, chunk + min(context, 2048), dtype=np.int64)))
    return shapes


def _timed_step(model: TransformerStack, dev: TorchDevice, q_lens, kv_lens, with_ranges) -> list:
    """Run one step with every op shape timed in isolation; returns the op samples."""
    batch = make_batch(dev, model, q_lens, kv_lens)
    ranges = _ranges_tensor(len(q_lens), kv_lens, dev.device) if with_ranges else None
    dev.begin_timing()
    h = model.forward(dev, batch, lambda i: ranges)
    model.sample(dev, batch, h)
    return dev.op_times_ns()


def _ranges_tensor(n: int, kv_lens, device):
    import torch

    # one 256-token image range per row near the start of its prompt (int32 (n, 1, 2))
    ends = np.minimum(np.asarray(kv_lens) - 2, 300)
    r = np.stack([np.full(n, 44), ends], axis=1).astype(np.int32)[:, None, :]
    return torch.from_numpy(r).to(device)


def replay_host_ns(model: TransformerStack, num_seqs: int = 128) -> float:
    """Host time (ns) of one ``CUDAGraph.replay()`` of a captured decode-size layer piece."""
    import torch

    w = model.weights[0]
    x = torch.zeros(num_seqs, model.cfg.hidden_size, device=model.device, dtype=model.dtype)

    def piece():
        return model._rms_norm(x, w["in_norm"]) @ w["qkv"]  # (num_seqs, qkv_size)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        piece()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        piece()
    torch.cuda.synchronize()
    t = time_host(graph.replay, warmup=5, repeats=40)
    torch.cuda.synchronize()
    return t.median_ns


def record_profile(model: TransformerStack, *, name: str, gpu_name: str, num_seqs: int = 128,
                   context: int = 9280, with_ranges: bool = False) -> DeviceProfile:
    """Measure ``model``'s per-op device durations and the runtime's host costs on this GPU."""
    import torch

    dev = TorchDevice(str(model.device), time_ops=True)
    samples: list[tuple[str, int, int, float]] = []
    for q_lens, kv_lens in default_shapes(num_seqs, context):
        _timed_step(model, dev, q_lens, kv_lens, with_ranges)  # compiles and warms kernels
        samples.extend(_timed_step(model, dev, q_lens, kv_lens, with_ranges))
    ops = fit_op_costs(samples)
    # host cost per op: a plain forward's launch time (the GPU is faster than the host here)
    plain = TorchDevice(str(model.device))
    q_lens, kv_lens = default_shapes(num_seqs, context)[0]
    batch = make_batch(plain, model, q_lens, kv_lens)
    n_ops = len(LAYER_OPS) * model.cfg.num_layers + len(HEAD_OPS) + len(TAIL_OPS)

    def launch_all():
        model.sample(plain, batch, model.forward(plain, batch, lambda i: None))

    t = time_host(launch_all, warmup=2, repeats=5)
    torch.cuda.synchronize()
    launch_ns = t.median_ns / n_ops
    sync_ns = time_host(torch.cuda.synchronize, warmup=3, repeats=20).median_ns
    ev_ns = time_host(lambda: torch.cuda.Event().record(), warmup=3, repeats=20).median_ns
    small = torch.zeros(16, dtype=torch.int32)  # 64 B
    big = torch.zeros(16 * 2**20 // 4, dtype=torch.int32)  # 16 MiB
    nb_small, nb_big = small.numel() * 4, big.numel() * 4
    pageable_small = time_host(lambda: small.to("cuda"), warmup=3, repeats=30).median_ns
    pageable_big = time_host(lambda: big.to("cuda"), warmup=2, repeats=5).median_ns
    pin_small, pin_big = small.pin_memory(), big.pin_memory()
    dev_small, dev_big = small.to("cuda"), big.to("cuda")

    def pinned_copy(dst, src):
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()

    # the synchronize each pinned copy needs to be timed is taken off: what is left is the copy
    h2d_small = time_host(lambda: pinned_copy(dev_small, pin_small), warmup=3, repeats=30).median_ns - sync_ns
    h2d_big = time_host(lambda: pinned_copy(dev_big, pin_big), warmup=2, repeats=5).median_ns - sync_ns
    d2h_small = time_host(lambda: pinned_copy(pin_small, dev_small), warmup=3, repeats=30).median_ns - sync_ns
    d2h_big = time_host(lambda: pinned_copy(pin_big, dev_big), warmup=2, repeats=5).median_ns - sync_ns

    replay_ns = replay_host_ns(model, num_seqs)

    def copy_cost(what, t_small, t_big):
        return copy_cost_from_two_sizes(nb_small, t_small, nb_big, t_big,
                                        origin=f"{what}: fitted through {nb_small} B and {nb_big} B copies")

    date = _dt.date.today().isoformat()
    return DeviceProfile(
        name=name,
        origin=f"measured on {gpu_name} ({date}) with labkit bench engine --write-profile, model {model.cfg.name}",
        parametric=False, ops=dict(ops), launch_overhead_ns=launch_ns, sync_overhead_ns=sync_ns,
        event_overhead_ns=ev_ns,
        h2d_pageable=copy_cost("pageable H2D, host time of the blocking copy", pageable_small, pageable_big),
        h2d_pinned=copy_cost("pinned H2D, host time of copy + synchronize less a bare synchronize", h2d_small, h2d_big),
        d2h_pinned=copy_cost("pinned D2H, host time of copy + synchronize less a bare synchronize", d2h_small, d2h_big),
        default_op=OpCost(base_ns=float(np.median([c.base_ns for c in ops.values()])) if ops else 3000.0),
        gpu_name=gpu_name, model=model.cfg.name, graph_replay_ns=replay_ns,
    )


def refit_copy_costs(profile: DeviceProfile, calibration) -> DeviceProfile:
    """``profile`` with its H2D copy costs re-derived from ``calibration`` (a ``BenchResult`` of the same machine)."""
    from dataclasses import replace

    from labkit.errors import UsageError

    by: dict[str, dict[int, float]] = {}
    for r in calibration.rows:
        if r.get("kind") == "gpu" and r.get("metric") == "host_ns" and r.get("size_bytes"):
            by.setdefault(r["variant"], {})[int(r["size_bytes"])] = float(r["median_ns"])
    where = f"{calibration.slug} {calibration.name} ({calibration.created[:10] or 'date unknown'})"
    fitted = {}
    for field, variant in (("h2d_pageable", "h2d_pageable"), ("h2d_pinned", "h2d_pinned")):
        sizes = sorted(by.get(variant, {}))
        if len(sizes) < 2:
            raise UsageError(f"{where} has {len(sizes)} timed size(s) of {variant}: two are needed")
        lo, hi = sizes[0], sizes[-1]
        sync = profile.sync_overhead_ns
        fitted[field] = copy_cost_from_two_sizes(
            lo, by[variant][lo] - sync, hi, by[variant][hi] - sync,
            origin=f"re-derived from {where}: host time of {variant} copies of {lo} B and {hi} B, "
                   f"less the profile's synchronize ({sync:.0f} ns)")
    old = profile.d2h_pinned
    fitted["d2h_pinned"] = CopyCost(old.latency_ns, old.bytes_per_ns,
                                    origin="UNKNOWN: not re-derived (calibration times no D2H copy); the figures "
                                           "recorded with the profile, whose latency fit was not the copy's alone")
    return replace(profile, **fitted)
