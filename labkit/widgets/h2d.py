"""Live prefix-range H2D explorer: pick sequences, layers, images and strategy, measure here."""

from __future__ import annotations

from labkit.attn.bench_h2d import make_batch_ranges, measure_host
from labkit.bench import format_table
from labkit.attn.prefix_ranges import PREFIX_RANGE_STRATEGIES
from labkit.device import measured_source, resolve_device

ALL = "all"


def measure_point(num_seqs: int, layers: int, images: int, strategy: str = ALL, device: str = "cpu",
                  repeats: int = 3) -> list[dict]:
    """Rows (as ``h2d_step``) for one point: host time per step and copies per step."""
    names = list(PREFIX_RANGE_STRATEGIES) if strategy == ALL else [strategy]
    ranges = make_batch_ranges(num_seqs, images)
    return [measure_host(n, ranges, layers, device, repeats=repeats, warmup=1) for n in names]


def format_rows(rows: list[dict], source: str) -> str:
    """The bench's table of ``measure_point`` rows, as HTML (host time per step, copies per step)."""
    note = "copies counted as a GPU would make them" if source == "measured-cpu" else "real H2D copies"
    return format_table(rows, columns=("variant", "median_ns", "h2d_per_step", "sync_per_step"),
                        caption=f"{source} ({note})")._repr_html_()


def make_h2d_widget(device: str | None = None, repeats: int = 3):
    """An ipywidgets VBox: sliders for sequences, layers and images, a strategy dropdown and a run button."""
    import ipywidgets as w

    dev = resolve_device(device)
    seqs = w.IntSlider(value=32, min=1, max=256, description="sequences")
    layers = w.IntSlider(value=34, min=1, max=62, description="layers")
    images = w.IntSlider(value=8, min=0, max=64, description="images/seq")
    strategy = w.Dropdown(options=[ALL, *PREFIX_RANGE_STRATEGIES], value=ALL, description="strategy")
    run = w.Button(description="measure", button_style="primary")
    out = w.HTML(value="<p>press measure (the per-layer strategy at 256 x 62 takes a few seconds)</p>")

    def on_click(_button=None):
        rows = measure_point(seqs.value, layers.value, images.value, strategy.value, dev, repeats)
        out.value = format_rows(rows, measured_source(dev))

    run.on_click(on_click)
    box = w.VBox([w.HBox([seqs, layers]), w.HBox([images, strategy]), run, out])
    box.on_measure = on_click  # exposed for tests and scripted use
    return box
