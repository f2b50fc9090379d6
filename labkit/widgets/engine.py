"""Live engine widget: choose variants and workload size, rerun the simulated engine, redraw."""

from __future__ import annotations

from labkit.viz.lab.engine import plot_engine_bars

PLACEHOLDERS = ("tensor", "list", "fast")
SCHEDULING = ("loop", "cursor")
PREFIX = ("none", "per_layer", "per_step", "pinned", "cached")
CUDAGRAPH = ("none", "piecewise", "full")


def run_selection(placeholders, scheduling, prefix_ranges, *, num_requests: int = 128, steps: int = 4,
                  warmup: int = 2, async_scheduling: bool = True, model: str = "gemma4-e4b-like",
                  workload: str = "pr40143", profile=None, cudagraph: str = "none"):
    """Run every combination on the simulated device (in CUDA-graph mode ``cudagraph``); returns ``(rows, figure)``."""
    from labkit.engine.runs import run_variants

    variants = [(p, s, r, async_scheduling, cudagraph) for p in placeholders for s in scheduling
                for r in prefix_ranges]
    if not variants:
        raise ValueError("choose at least one placeholder, scheduling strategy and prefix-range strategy")
    rows, _ = run_variants("sim", variants, model=model, workload=workload, num_requests=num_requests,
                           steps=steps, warmup=warmup, profile=profile)
    return rows, plot_engine_bars(rows, title="Engine (rerun here)")


def make_engine_widget(*, profile=None):
    """An ipywidgets panel: variant pickers, request count, async toggle, a Run button and the figure."""
    import ipywidgets as w

    ph = w.SelectMultiple(options=PLACEHOLDERS, value=("tensor", "list"), description="placeholder")
    sc = w.SelectMultiple(options=SCHEDULING, value=("loop",), description="scheduling")
    pr = w.SelectMultiple(options=PREFIX, value=("none",), description="prefix ranges")
    nreq = w.IntSlider(value=64, min=8, max=128, step=8, description="requests")
    is_async = w.Checkbox(value=True, description="async scheduling")
    graphs = w.Dropdown(options=CUDAGRAPH, value="none", description="CUDA graphs")
    run = w.Button(description="Run (simulated)", button_style="primary")
    status = w.HTML("")
    out = w.Output()

    def on_click(_):
        status.value = "running..."
        try:
            rows, figure = run_selection(ph.value, sc.value, pr.value, num_requests=nreq.value,
                                         async_scheduling=is_async.value, profile=profile, cudagraph=graphs.value)
        except ValueError as exc:
            status.value = f"<b>{exc}</b>"
            return
        status.value = f"{len(rows)} runs done (simulated)"
        out.clear_output()
        with out:
            figure.show()

    run.on_click(on_click)
    return w.VBox([w.HBox([ph, sc, pr]), w.HBox([nreq, is_async, graphs, run]), status, out])
