"""Live explorer for the next bubble: pick requests and images, see the recorded host cost per step.

``make_next_bubble_widget(rows)`` returns an ipywidgets box; its callback is the plain
function :func:`describe_point`, testable without a kernel. It reads recorded
``vllm_prefix_ranges`` rows (``labkit.vllm.census.nextbubble.recorded_rows()``); nothing is measured live.
"""

from __future__ import annotations

from labkit.vllm.census.nextbubble import expected_effect, lookup, side_by_side


def describe_point(rows: list[dict], num_requests: int, images: int, device_step_ms: float) -> str:
    """HTML: installed vs patched host ms per step at one grid point and the expected GPU idle share."""
    rec = lookup(rows, num_requests, images)
    if rec is None or "speedup" not in rec:
        return f"<p>{num_requests} requests x {images} images: not measured (pick a recorded grid point)</p>"
    eff = expected_effect(rec["installed_us"] / 1e3, rec["patched_us"] / 1e3, device_step_ms)
    return (
        f"<p><b>{num_requests} requests x {images} images</b> ({rec['machine']}, measured-cpu host time): "
        f"installed {rec['installed_us'] / 1e3:.2f} ms, patched {rec['patched_us'] / 1e3:.3f} ms per step "
        f"({rec['speedup']:.0f}x).</p>"
        f"<p>With a {device_step_ms:g} ms device step: step {eff['step_ms_installed_overlapped']:.1f} to "
        f"{eff['step_ms_installed_serial']:.1f} ms installed vs {eff['step_ms_patched_overlapped']:.1f} to "
        f"{eff['step_ms_patched_serial']:.1f} ms patched; GPU idle "
        f"{eff['gpu_idle_fraction_installed_overlapped']:.0%} vs {eff['gpu_idle_fraction_patched_overlapped']:.0%} "
        f"(perfect overlap bound).</p>"
    )


def make_next_bubble_widget(rows: list[dict], device_step_ms: float = 24.58):
    """An ipywidgets VBox: requests / images sliders over the recorded grid and a device-step box."""
    import ipywidgets as w

    table = side_by_side(rows)
    reqs = sorted({r["num_requests"] for r in table}) or [1]
    imgs = sorted({r["images"] for r in table}) or [1]
    req = w.SelectionSlider(options=reqs, value=reqs[-1] if 128 not in reqs else 128, description="requests")
    img = w.SelectionSlider(options=imgs, value=imgs[-1] if 32 not in imgs else 32, description="images")
    step = w.BoundedFloatText(value=device_step_ms, min=0.1, max=10_000.0, description="device ms")
    out = w.HTML()

    def refresh(_=None) -> None:
        out.value = describe_point(rows, req.value, img.value, step.value)

    for control in (req, img, step):
        control.observe(refresh, names="value")
    refresh()
    return w.VBox([w.HBox([req, img, step]), out])
