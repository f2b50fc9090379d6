"""Tables a person reads: units in the headers, three significant figures, no index, folded when long.

:func:`format_table` takes a DataFrame or a list of row dicts with the lab's column names and
returns a :class:`Table` whose HTML (``_repr_html_``) shows rates, times, shares and sizes in
their units, every float with three significant figures, and the rows past ``max_rows`` behind
a ``<details>`` click.

More: docs/reference.md, ``labkit.viz.tables``.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

#: rows shown before the rest folds into ``<details>``
MAX_ROWS = 10

_TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0))  # unit, ns per unit
_SUFFIX_NS = {"_ns": 1.0, "_us": 1e3, "_ms": 1e6, "_s": 1e9}
_TABLE_STYLE = ("border-collapse:collapse;font-size:12px;max-width:100%;table-layout:auto;margin:4px 0")
_CELL_STYLE = "white-space:normal;overflow-wrap:anywhere;padding:2px 6px;border-bottom:1px solid #e5e5e5"


def sig3(value) -> str:
    """``value`` with three significant figures, without exponent notation: ``11739.05 -> "11,700"``,
    ``0.0012345 -> "0.00123"``, ``5.0 -> "5"``; None / NaN -> ``""``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    v = float(value)
    if v == 0 or math.isinf(v):
        return "0" if v == 0 else str(v)
    exp = math.floor(math.log10(abs(v)))
    decimals = max(0, 2 - exp)
    rounded = round(v, 2 - exp)
    text = f"{rounded:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _numbers(values) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and not _is_missing(v)]


def _median(values: list[float]) -> float:
    s = sorted(abs(v) for v in values)
    return s[len(s) // 2] if s else 0.0


def time_unit(values_ns: list[float]) -> tuple[str, float]:
    """The unit (``s``, ``ms``, ``us`` or ``ns``) that the median of ``values_ns`` reads best in, and
    its size in ns: the largest unit in which the median is at least 1."""
    med = _median(values_ns)
    for unit, scale in _TIME_UNITS:
        if med >= scale:
            return unit, scale
    return "ns", 1.0


def duration(ns: float) -> str:
    """A time in ns as a reader reads it: three significant figures in the unit that suits it (``21.4 us``)."""
    unit, scale = time_unit([ns])
    return f"{sig3(ns / scale)} {unit}"


def _words(name: str) -> str:
    return name.replace("_", " ").strip()


def column_format(name: str, values, unit: str | None = None) -> tuple[str, callable]:
    """The header and a cell formatter for column ``name`` holding ``values`` (see the module text);
    ``unit`` (``s``, ``ms``, ``us``, ``ns``) puts a time column in that unit whatever its values."""
    nums = _numbers(values)
    for suffix, rate in (("_tok_s", " tok/s"), ("_req_s", " req/s"), ("_per_s", " per s")):  # rates, not times
        if name.endswith(suffix):
            return _words(name[: -len(suffix)]) + rate, _cell
    for suffix, ns in _SUFFIX_NS.items():
        if name.endswith(suffix) and nums:
            shown, scale = (unit, dict(_TIME_UNITS)[unit]) if unit else time_unit([v * ns for v in nums])
            factor = ns / scale
            return f"{_words(name[: -len(suffix)])} ({shown})", (lambda v, f=factor: sig3(v * f) if _is_number(v) else _cell(v))
    if name.endswith("_pct") and nums:
        return f"{_words(name[:-4])} (%)", lambda v: sig3(v) if _is_number(v) else _cell(v)
    for suffix in ("_fraction", "_frac", "_share"):
        if (name.endswith(suffix) or name == suffix[1:]) and nums and all(-1.5 <= v <= 1.5 for v in nums):
            return f"{_words(name)} (%)", lambda v: sig3(100 * v) if _is_number(v) else _cell(v)
    if ("speedup" in name or name.endswith("_ratio") or name == "ratio") and nums:
        return _words(name), lambda v: f"{sig3(v)}x" if _is_number(v) else _cell(v)
    if name.endswith("_bytes") and nums:
        scale, unit = next(((s, u) for s, u in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")) if _median(nums) >= s), (1, "B"))
        return f"{_words(name[:-6])} ({unit})", lambda v, s=scale: sig3(v / s) if _is_number(v) else _cell(v)
    return _words(name), _cell


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not _is_missing(v)


def _cell(v) -> str:
    if _is_missing(v):
        return ""
    if isinstance(v, float):
        return sig3(v)
    if isinstance(v, (list, tuple)):
        return ", ".join(_cell(x) for x in v)
    return sig3(v) if isinstance(v, (bool, int)) else str(v)


@dataclass(frozen=True)
class Table:
    """A formatted table: ``headers``, ``cells`` (strings), an optional ``caption``; HTML in notebooks."""

    headers: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    caption: str = ""
    max_rows: int = MAX_ROWS

    def _aligns(self) -> list[str]:
        """Per column: ``right`` where every cell is a number (a trailing ``x`` or ``%`` allowed), else ``left``."""
        def numeric(c: str) -> bool:
            return c.rstrip("x%").replace(",", "").replace(".", "", 1).lstrip("-").isdigit()
        return ["right" if all(numeric(r[i]) for r in self.cells if r[i]) and any(r[i] for r in self.cells) else "left"
                for i in range(len(self.headers))]

    def _html_table(self, rows) -> str:
        align = self._aligns()
        head = "".join(f'<th style="{_CELL_STYLE};text-align:{a}">{html.escape(h)}</th>' for h, a in zip(self.headers, align))
        body = "".join("<tr>" + "".join(f'<td style="{_CELL_STYLE};text-align:{a}">{html.escape(c)}</td>'
                                        for c, a in zip(row, align)) + "</tr>" for row in rows)
        return f'<table class="labkit-table" style="{_TABLE_STYLE}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    def _repr_html_(self) -> str:
        caption = f'<div style="font-size:12px;color:#555">{html.escape(self.caption)}</div>' if self.caption else ""
        if not self.cells:
            return f'<div class="labkit-table-wrap">{caption}<p>(no rows)</p></div>'
        shown = self._html_table(self.cells[: self.max_rows])
        if len(self.cells) > self.max_rows:
            shown += (f"<details><summary>all {len(self.cells)} rows</summary>{self._html_table(self.cells)}</details>")
        return f'<div class="labkit-table-wrap" style="max-width:100%">{caption}{shown}</div>'

    def __len__(self) -> int:
        return len(self.cells)


def format_table(data, *, columns=None, rename: dict | None = None, caption: str = "",
                 max_rows: int = MAX_ROWS, time_unit: str | None = None) -> Table:
    """``data`` (a DataFrame or a list of dicts) as a :class:`Table`; ``columns`` picks and orders the
    columns (absent ones are skipped), ``rename`` gives a header of its own to a column (its unit is
    still added from the name's suffix), ``time_unit`` puts every time column in one unit (columns
    compared side by side)."""
    if hasattr(data, "to_dict"):
        records = data.to_dict("records")
        names = list(data.columns)
    else:
        records = [dict(r) for r in (data or [])]
        names = []
        for r in records:
            names += [k for k in r if k not in names]
    if columns is not None:
        names = [c for c in columns if c in names]
    names = [n for n in names if any(not _is_missing(r.get(n)) for r in records)]  # no empty column
    headers, formats = [], []
    for n in names:
        header, fmt = column_format(n, [r.get(n) for r in records], time_unit)
        if rename and n in rename:
            unit = header[header.rfind(" ("):] if header.endswith(")") and " (" in header else ""
            header = rename[n] + unit
        headers.append(header)
        formats.append(fmt)
    cells = tuple(tuple(fmt(r.get(n)) for n, fmt in zip(names, formats)) for r in records)
    return Table(tuple(headers), cells, caption, max_rows)


def bars_html(items: list[tuple[str, float]], unit: str, *, log: bool | None = None, colour: str = "#1f5f99",
              highlight: tuple[str, ...] = (), caption: str = "") -> str:
    """A small horizontal bar chart: one bar per ``(label, value)``, the value printed at its end in
    ``unit``. ``log`` (default: when the values span more than 30x) scales the bars by log10; the
    caption then says so. Bars whose label is in ``highlight`` are drawn in orange. Plain HTML, no
    plotly: an answer box comes before its page sets plotly up, and needs no script."""
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
        f'<div style="flex:0 0 34%;text-align:right;font-size:12px;overflow-wrap:anywhere">{html.escape(str(lab))}</div>'
        f'<div style="flex:1 1 auto"><div style="width:{width(v):.1f}%;min-width:2px;height:12px;display:inline-block;'
        f'vertical-align:middle;background:{"#e67e22" if lab in highlight else colour}"></div>'
        f'<span style="font-size:12px;margin-left:4px">{html.escape(str(sig3(v)))} {html.escape(str(unit))}</span></div></div>'
        for lab, v in items)
    note = caption + (" (log scale)" if log else "")
    note_html = f'<div style="font-size:12px;color:#555">{html.escape(str(note))}</div>' if note else ""
    return f'<div class="labkit-answer-bars" style="max-width:640px;margin:6px 0">{note_html}{rows}</div>'
