"""Live roofline for the prefix-LM kernel: pick a case and a shape, re-measure on the GPU, see where it lands.

Without a GPU the button is disabled and says why; an exported page shows one line in its place.
"""

from __future__ import annotations

import html

from labkit.errors import choice
from labkit.viz.lab.roofline import SHOWN_VARIANTS, Roofline, plot_roofline, roofline_points

#: case kind -> (description, sliding window)
KINDS = {
    "prefill_global": ("prefill, global layer", 0),
    "prefill_local": ("prefill, local layer (window 1024)", 1024),
    "decode": ("decode rows over the whole prompt", 0),
}


def make_case(kind: str, num_images: int = 32, decode_rows: int = 128):
    """The benchmark's case of ``kind`` with ``num_images`` images of 256 tokens in the prompt
    (and ``decode_rows`` rows for decode); 32 images and 128 rows give ``attn_bench``'s own cases."""
    from labkit.attn.bench_attn import AttnCase, image_prompt

    choice(KINDS, kind, "case", ValueError)
    if num_images < 1 or decode_rows < 1:
        raise ValueError("need at least one image and one decode row")
    n, ranges = image_prompt(num_images)
    what, window = KINDS[kind]
    if kind == "decode":
        return AttnCase(f"decode[{num_images} img x {decode_rows}]", tuple((1, n + 1 + 7 * i) for i in range(decode_rows)),
                        (ranges,) * decode_rows, note=f"{decode_rows} {what}")
    return AttnCase(f"{kind}[{num_images} img]", ((n, n),), (ranges,), sliding_window=window,
                    note=f"{num_images} images x 256 + text, {what}")


def measure_case(case, variants=SHOWN_VARIANTS, *, repeats: int = 20) -> list[dict]:
    """``attn_bench`` rows for ``case`` timed on this GPU (bf16), tagged with the GPU's name and machine slug."""
    import torch

    from labkit.attn.bench_attn import build_case, run_variant
    from labkit.device import describe_machine

    run = build_case(case, "cuda", torch.bfloat16)
    machine = describe_machine("cuda")
    rows = [run_variant(run, v, device="cuda", timed=True, repeats=repeats) for v in variants]
    for row in rows:
        row.update(machine=machine.get("slug"), gpu_name=machine.get("gpu_name"))
    return rows


def measured_roofline(kind: str, num_images: int, decode_rows: int, *, recorded: Roofline | None = None,
                      measure=measure_case) -> tuple[Roofline, list[dict]]:
    """Measure one shape (``measure(case) -> rows``) and return the roofline of the recorded runs plus
    the new ones, and the new rows (a row that failed keeps its ``error``)."""
    case = make_case(kind, num_images, decode_rows)
    rows = measure(case)
    live = roofline_points(rows, cases={case.name: case})
    recorded = recorded if recorded is not None else Roofline()
    gpus = {p["gpu_name"] for p in live.points}
    points = [p for p in recorded.points if p["gpu_name"] in gpus] + live.points
    peaks = {g: recorded.peaks.get(g) or live.peaks[g] for g in gpus}
    return Roofline(points=points, peaks=peaks, skipped=live.skipped), rows


def _summary(rows: list[dict], roof: Roofline) -> str:
    mine = {(p["case"], p["variant"]): p for p in roof.points}
    parts = []
    for row in rows:
        p = mine.get((row.get("case"), row.get("variant")))
        if p:
            parts.append(f"{p['variant']}: {p['median_ms']:.3f} ms, {p['tflops']:.1f} TFLOP/s, {p['tb_s']:.2f} TB/s, "
                         f"{p['pct_of_roof']:.0f}% of the roof ({p['bound']}-bound)")
        else:
            parts.append(f"{row.get('variant')}: {row.get('error', 'not placed')}")
    return "<br>".join(html.escape(part) for part in parts + roof.skipped)


def make_roofline_widget(device: str = "auto", *, recorded: Roofline | None = None, repeats: int = 20):
    """An ipywidgets VBox: case, images and decode rows, a measure button (GPU only), the roofline below."""
    import ipywidgets as w

    from labkit.device import resolve_device
    from labkit.results import ATTN_BENCH, find_all, results_rows

    gpu = resolve_device(device) == "cuda"
    if recorded is None:
        recorded = roofline_points(results_rows(find_all(ATTN_BENCH, source="measured-gpu")))
    kind = w.Dropdown(options=[(v[0], k) for k, v in KINDS.items()], value="decode", description="case")
    images = w.IntSlider(value=32, min=1, max=64, description="images", continuous_update=False)
    rows = w.IntSlider(value=128, min=8, max=256, step=8, description="decode rows", continuous_update=False)
    button = w.Button(description="measure on this GPU", button_style="primary", disabled=not gpu)
    note = w.HTML("FlexAttention compiles once per shape: a new shape takes a few seconds more." if gpu else
                  f"Re-measuring needs a GPU (this kernel runs on {resolve_device(device)}): the roofline "
                  "above shows the recorded runs.")
    out = w.Output()

    def on_measure(_button=None):
        note.value = "measuring..."
        try:
            roof, new = measured_roofline(kind.value, images.value, rows.value, recorded=recorded,
                                          measure=lambda case: measure_case(case, repeats=repeats))
        except (RuntimeError, ValueError) as exc:  # e.g. the GPU out of memory on a large shape
            note.value = f"<span style='color:#b00'>{html.escape(str(exc).splitlines()[0] if str(exc) else repr(exc))}</span>"
            return
        note.value = _summary(new, roof)
        fig = plot_roofline(roof, title=f"{new[0]['case'] if new else kind.value}: measured now, with the recorded runs")
        # the Output widget's state, not a display inside it: a headless client that mimics Output
        # capture (nbclient) would answer such a display on the shell socket (see labkit.report.client)
        out.outputs = ({"output_type": "display_data", "data": fig._repr_mimebundle_(), "metadata": {}},)

    button.on_click(on_measure)
    box = w.VBox([w.HBox([kind, images, rows]), button, note, out])
    box.on_measure = on_measure  # exposed for tests and scripted use
    return box
