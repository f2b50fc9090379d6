"""The answer box a lab page opens with: its finding, where each number comes from, a small table or chart."""

from __future__ import annotations

import html
from dataclasses import dataclass

from labkit.bench import sig3
from labkit.results import base_name

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
        where = ('<div style="font-size:12px;color:#555;margin-top:4px">From: '
                 + "; ".join(esc(s) for s in self.sources) + "</div>") if self.sources else ""
        detail = f'<div class="labkit-answer-detail">{self.detail}</div>' if self.detail else ""
        return (f'<div class="labkit-answer" style="{_BOX_STYLE}"><div><b>What this page finds.</b> {self.text}</div>'
                f"{detail}{where}</div>")

    def __str__(self) -> str:
        return self._repr_html_()


def row(rows, **match) -> dict | None:
    """The first row whose columns equal ``match``."""
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)
