"""The answer box a lab page opens with: its finding in a sentence or two, where each number comes
from, and a small table or bar chart.

:class:`Answer` renders as an HTML element of class ``labkit-answer`` (``_repr_html_``, so a
notebook cell that returns one shows it, and the exported page keeps it). The page functions
(:mod:`labkit.report.answers.host`, ``gpu``, ``vllm``) build their numbers from recorded results;
nothing in the box is typed by hand. :func:`bars_html` draws a small horizontal bar chart in plain
HTML (no plotly: the box comes before the page sets plotly up, and needs no script).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from labkit.bench import sig3

_BOX_STYLE = ("border-left:5px solid #1f5f99;background:#f3f6fa;padding:8px 14px;margin:8px 0;"
              "font-family:sans-serif;font-size:14px;line-height:1.45;max-width:100%;box-sizing:border-box")


def esc(value) -> str:
    """``value`` escaped for HTML."""
    return html.escape(str(value))


def num(value, unit: str = "") -> str:
    """A number with three significant figures in bold, with its unit (``<b>5.71</b>x``)."""
    return f"<b>{sig3(value)}</b>{esc(unit)}"


def pct(fraction) -> str:
    """A fraction of one as a bold percentage (``0.784 -> 78.4%``)."""
    return f"<b>{sig3(100 * fraction)}</b>%"


def cite(*results) -> str:
    """Where numbers come from: ``name and name recorded on machine (source, GPU, size)``, one clause
    per machine, source and size the results share."""
    from labkit.results import base_name

    groups: dict[tuple, list[str]] = {}
    for r in results:
        gpu = (r.machine or {}).get("gpu_name")
        groups.setdefault((r.slug, f"{r.source}{', ' + gpu if gpu else ''}, {r.size} size"), []).append(base_name(r.name))
    return "; ".join(f"{' and '.join(names)} recorded on {slug} ({how})" for (slug, how), names in groups.items())


@dataclass(frozen=True)
class Answer:
    """A page's finding: ``text`` (HTML, its numbers read from results, at most ~80 words with the
    sources), ``sources`` (one line per result it read: :func:`cite`), ``detail`` (HTML: one small
    table or chart; may be empty)."""

    text: str
    sources: tuple[str, ...] = ()
    detail: str = ""

    def _repr_html_(self) -> str:
        where = ""
        if self.sources:
            where = ('<div style="font-size:12px;color:#555;margin-top:4px">From: '
                     + "; ".join(esc(s) for s in self.sources) + "</div>")
        detail = f'<div class="labkit-answer-detail">{self.detail}</div>' if self.detail else ""
        return (f'<div class="labkit-answer" style="{_BOX_STYLE}"><div><b>What this page finds.</b> {self.text}</div>'
                f"{detail}{where}</div>")

    def __str__(self) -> str:
        return self._repr_html_()


def bars_html(items: list[tuple[str, float]], unit: str, *, log: bool | None = None, colour: str = "#1f5f99",
              highlight: tuple[str, ...] = (), caption: str = "") -> str:
    """A small horizontal bar chart: one bar per ``(label, value)``, the value printed at its end in
    ``unit``. ``log`` (default: when the values span more than 30x) scales the bars by log10; the
    caption then says so. Bars whose label is in ``highlight`` are drawn in orange."""
    items = [(lab, v if isinstance(v, int) else float(v)) for lab, v in items
             if v is not None and not (isinstance(v, float) and math.isnan(v))]  # an int is printed whole
    if not items:
        return ""
    positive = [v for _, v in items if v > 0]
    top = max((v for _, v in items), default=0.0)
    if log is None:
        log = bool(positive) and top / min(positive) > 30
    lo = math.log10(min(positive)) - 0.3 if log and positive else 0.0

    def width(v: float) -> float:
        if top <= 0 or v <= 0:
            return 0.0
        if log:
            return 80 * (math.log10(v) - lo) / (math.log10(top) - lo)  # room left for the value
        return 80 * v / top

    rows = "".join(
        f'<div style="display:flex;align-items:center;gap:6px;margin:1px 0">'
        f'<div style="flex:0 0 34%;text-align:right;font-size:12px;overflow-wrap:anywhere">{esc(lab)}</div>'
        f'<div style="flex:1 1 auto"><div style="width:{width(v):.1f}%;min-width:2px;height:12px;display:inline-block;'
        f'vertical-align:middle;background:{"#e67e22" if lab in highlight else colour}"></div>'
        f'<span style="font-size:12px;margin-left:4px">{esc(sig3(v))} {esc(unit)}</span></div></div>'
        for lab, v in items)
    note = caption + (" (log scale)" if log else "")
    note_html = f'<div style="font-size:12px;color:#555">{esc(note)}</div>' if note else ""
    return f'<div class="labkit-answer-bars" style="max-width:640px;margin:6px 0">{note_html}{rows}</div>'


def row(rows, **match) -> dict | None:
    """The first row whose columns equal ``match``."""
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)
