"""Live prefix-LM mask explorer: choose sequence lengths, image ranges and the sliding window.

``make_mask_widget()`` returns an ipywidgets box; its callback is the plain function
:func:`mask_figure`, testable without a kernel. The heatmap is put in the box's Output
widget as its state (``outputs``), never displayed inside it, so no client has to answer
the kernel while the cell runs. Exported HTML keeps no Python callbacks:
use :func:`labkit.viz.lab.mask.plot_mask_window_slider` for a control that survives export.
"""

from __future__ import annotations

import re

from labkit.errors import UsageError

_PAIR = re.compile(r"^\s*(\d+)\s*[-:]\s*(\d+)\s*$")


def parse_ranges(text: str) -> list[tuple[int, int]]:
    """``"2-7, 12-17"`` (or ``2:7``) -> ``[(2, 7), (12, 17)]``, inclusive; ``UsageError`` on bad text."""
    out = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = _PAIR.match(part)
        if not m:
            raise UsageError(f"bad range {part.strip()!r}: write START-END, e.g. 2-7")
        out.append((int(m.group(1)), int(m.group(2))))
    return out


def mask_figure(q_len: int, kv_len: int, ranges_text: str, sliding_window: int = 0):
    """The mask heatmap for the widget's current values (q_len is capped at kv_len)."""
    from labkit.viz.lab.mask import plot_mask

    return plot_mask(min(q_len, kv_len), kv_len, parse_ranges(ranges_text), sliding_window)


def make_mask_widget(q_len: int = 24, kv_len: int = 24, ranges: str = "2-7, 12-17", sliding_window: int = 0):
    """An ipywidgets VBox: sliders for keys, queries and window, a text box for ranges, the heatmap below."""
    import ipywidgets as w

    kv = w.IntSlider(value=kv_len, min=1, max=96, description="keys")
    ql = w.IntSlider(value=q_len, min=1, max=96, description="queries")
    win = w.IntSlider(value=sliding_window, min=0, max=48, description="window")
    text = w.Text(value=ranges, description="ranges", placeholder="2-7, 12-17")
    out = w.Output()
    note = w.HTML()

    def redraw(_change=None):
        try:
            fig = mask_figure(ql.value, kv.value, text.value, win.value)
        except (UsageError, ValueError) as exc:
            note.value = f"<span style='color:#b00'>{exc}</span>"
            return
        note.value = ""
        # Set the Output widget's outputs (a state update sent by the kernel) instead of
        # displaying inside it: a headless client that mimics Output capture (nbclient) answers
        # such a display on the shell socket while it waits for the cell's reply, which can
        # cost it the reply's wakeup (see labkit.report.client). The data is the figure's own
        # mime bundle (IPython's display protocol), what display() would have sent.
        out.outputs = ({"output_type": "display_data", "data": fig._repr_mimebundle_(), "metadata": {}},)

    for control in (kv, ql, win, text):
        control.observe(redraw, names="value")
    box = w.VBox([w.HBox([kv, ql]), w.HBox([win, text]), note, out])
    box.redraw = redraw  # exposed for tests and scripted use
    redraw()
    return box
