"""The one bench runner: every ``labkit bench TARGET`` and ``labkit calibrate`` run through it.

The shape of Triton's ``triton.testing.Benchmark`` + ``perf_report``: a target declares a
:class:`Bench`: its result name (a :data:`labkit.results.NAMES` constant), its axes (``x_names``)
with their quick and full values, its variants (``line_vals`` of ``line_arg``), a function measuring
one point, and the variant its ratios are over (``base``). :meth:`Bench.run` sweeps every point x
variant, times a point through :mod:`labkit.timing` where ``measure`` returns a callable (else the
target's own :class:`~labkit.timing.Timing` or rows), adds the ratios, and makes the result
(:func:`labkit.results.make_result`: provenance and the run's unit costs), rewritten after each point
while it runs. :func:`report` prints each result as one table (:func:`format_table`), saves it unless
``--no-save`` and writes ``--json OUT``; :func:`add_run_options` / :func:`resolve_run_options` are the
options every target and ``labkit calibrate`` share.

Targets that are not a plain sweep (``trace``, ``engine``, ``attn``, ``serve-sim``, ``vllm-overlap``,
``vllm-step``, ``vllm-input``, ``calibrate``) declare a ``Bench`` without ``measure``: its sizes
(:meth:`Bench.at`), name and source; they measure their rows themselves, add ratios with
:func:`add_ratios` and hand the result (:meth:`Bench.result`) to :func:`report`, as the sweeps do.

The one table format (:func:`format_table`), in a terminal and in the notebooks alike: units in the
headers, three significant figures, no index, no empty column; HTML folds the rows past ``max_rows``.

More: docs/reference.md, ``labkit.bench``.
"""

from __future__ import annotations

import argparse
import html
import itertools
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from labkit.errors import UsageError, choice
from labkit.fileio import write_json
from labkit.results import (SIZES, BenchResult, PartialResult, base_name, keep_unit_costs, make_result, save_result,
                            sized_name)
from labkit.timing import Timing, progress, time_cuda, time_host

# -- the options every target shares ---------------------------------------------------------------------


def add_run_options(p: argparse.ArgumentParser, *, size_help: str = "quick (default: seconds to minutes) or "
                    "full (the recorded size)", sized: bool = True) -> None:
    """Add ``--size`` (unless not ``sized``), ``--json OUT``, ``--no-save`` and ``-v``."""
    if sized:
        p.add_argument("--size", choices=SIZES, default=SIZES[0], help=size_help)
    p.add_argument("--json", metavar="OUT", default=None,
                   help="also write the result as JSON to OUT (several: one object, name -> result)")
    p.add_argument("--no-save", action="store_true", help="do not write to the results store")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")


def resolve_run_options(args: argparse.Namespace) -> str | None:
    """Check the shared options before any work starts; returns the size. A ``--json`` path that is a
    folder is a ``UsageError``. The results this run makes keep its unit costs (``keep_unit_costs``)."""
    if args.json is not None:
        out = Path(args.json)
        if not args.json or out.is_dir():
            raise UsageError(f"--json {args.json!r} is not a file path")
        if out.parent.exists() and not out.parent.is_dir():
            raise UsageError(f"--json {args.json}: {out.parent} is not a folder")
    if args.verbose:
        set_verbose()
    keep_unit_costs()
    return getattr(args, "size", None)


def set_verbose(on: bool = True) -> None:
    """Log the lab's progress (INFO) to stderr."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(format="%(name)s: %(message)s")
    root.setLevel(logging.INFO if on else logging.WARNING)


def add_grid_options(p: argparse.ArgumentParser) -> None:
    """``--requests`` and ``--images``: the grid of the vLLM targets."""
    p.add_argument("--requests", type=int, nargs="+", default=None, help="requests per step to sweep (1-256)")
    p.add_argument("--images", type=int, nargs="+", default=None, help="images per request to sweep (1-64)")


def grid_from_args(args: argparse.Namespace, grid: dict) -> dict:
    """A copy of ``grid`` (the size's values) with ``--requests``/``--images`` applied and checked."""
    grid = dict(grid)
    if args.requests:
        grid["requests"] = tuple(args.requests)
    if args.images:
        grid["images"] = tuple(args.images)
    if any(not 1 <= r <= 256 for r in grid["requests"]) or any(not 1 <= i <= 64 for i in grid["images"]):
        raise UsageError("requests must be in 1..256 and images in 1..64")
    return grid


def positive_ints(text: str) -> tuple[int, ...]:
    """``"1,8,32"`` -> ``(1, 8, 32)`` (an argparse ``type``)."""
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def parse_image_size(text: str) -> tuple[int, int]:
    """``HxW`` -> ``(width, height)``."""
    try:
        h, w = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--image-size must look like 64x96 (height x width), got {text!r}") from None
    if w < 1 or h < 1:
        raise UsageError(f"--image-size must be positive, got {text!r}")
    return w, h


# -- a target's spec and its sweep ------------------------------------------------------------------------


def add_ratios(rows: list[dict], base, name: str, *, over: Sequence[str], line_arg: str | tuple = "variant",
               value: str = "median_ns", where: dict | None = None) -> list[dict]:
    """Add ``name`` = the ``base`` variant's ``value`` over each row's, the rows matched on the fields
    ``over`` (None where there is no base or a zero); only rows whose fields equal ``where``'s when given.
    ``line_arg`` may be a tuple of fields (``base`` then a tuple of their values)."""
    def line(r):
        return tuple(r.get(f) for f in line_arg) if isinstance(line_arg, tuple) else r.get(line_arg)

    def key(r):
        return tuple(r.get(f) for f in over)

    mine = [r for r in rows if all(r.get(k) == v for k, v in (where or {}).items())]
    ref = {key(r): r.get(value) for r in mine if line(r) == base}
    for r in mine:
        b = ref.get(key(r))
        r[name] = b / r[value] if b and r.get(value) else None
    return rows


@dataclass
class Bench:
    """One target (see the module text): ``axes`` and ``knobs`` map a name to its ``(quick, full)``
    values; ``measure(**point, **knobs, <line_arg>=variant)`` returns a callable (timed here with the
    ``repeats`` and ``warmup`` knobs), a ``Timing`` (a row of the point and its quantiles), a row or
    a list of rows. ``ratios``: column -> the variant it is over (:func:`add_ratios` on ``value``, rows
    matched on ``ratio_over``, default the axes; only the rows ``ratio_where[column]`` names, if any)."""

    name: str
    axes: dict = field(default_factory=dict)
    line_vals: Sequence = ()
    measure: Callable | None = None
    line_arg: str | tuple = "variant"
    knobs: dict = field(default_factory=dict)
    ratios: dict = field(default_factory=dict)
    ratio_over: Sequence[str] | None = None
    ratio_where: dict = field(default_factory=dict)
    value: str = "median_ns"
    timer: str = "host"
    columns: Sequence[str] | None = None
    source: str = "measured-cpu"
    params: dict = field(default_factory=dict)

    def at(self, size: str, **given) -> dict:
        """Every axis and knob at ``size``, a value ``given`` (not None) in place of the preset."""
        choice(SIZES, size, "size")
        out = {k: v[SIZES.index(size)] for k, v in {**self.axes, **self.knobs}.items()}
        out.update({k: v for k, v in given.items() if v is not None})
        return out

    def points(self, size: str, **given) -> list[dict]:
        """Every point of the axes at ``size``, the first axis outermost."""
        values = self.at(size, **given)
        return [dict(zip(self.axes, p)) for p in itertools.product(*(values[a] for a in self.axes))]

    def _rows(self, point: dict, knobs: dict, variant) -> list[dict]:
        line = {self.line_arg: variant} if self.line_vals else {}
        got = self.measure(**point, **knobs, **line)
        if callable(got):
            timer = time_cuda if self.timer == "cuda" else time_host
            got = timer(got, warmup=knobs.get("warmup", 2), repeats=knobs.get("repeats", 10))
        if isinstance(got, Timing):
            got = {**line, **point, **got.as_row()}
        return [got] if isinstance(got, dict) else list(got)

    def sweep(self, size: str, *, on_rows=None, **given) -> list[dict]:
        """The rows of every point x variant (``on_rows(rows)`` after each), with the ratios."""
        values = self.at(size, **given)
        knobs = {k: values[k] for k in self.knobs}
        rows: list[dict] = []
        points = self.points(size, **given)
        for point in progress(points, total=len(points), desc=self.name):
            for variant in self.line_vals or (None,):
                rows += self._rows(point, knobs, variant)
                if on_rows:
                    on_rows(rows)
        for name, base in self.ratios.items():
            add_ratios(rows, base, name, line_arg=self.line_arg, value=self.value, where=self.ratio_where.get(name),
                       over=tuple(self.axes) if self.ratio_over is None else self.ratio_over)
        return rows

    def result(self, rows, size: str, *, params: dict | None = None, source: str | None = None,
               machine: dict | None = None) -> BenchResult:
        """Result ``name`` (``<name>_quick`` when quick) of ``rows``: params ``size``, ``params`` and the spec's."""
        return make_result(sized_name(self.name, size), rows, params={"size": size, **self.params, **(params or {})},
                           source=source or self.source, size=size, machine=machine)

    def run(self, size: str, *, save: bool = True, **given) -> BenchResult:
        """:meth:`sweep` and :meth:`result`, saved unless not ``save`` (rewritten after each point meanwhile)."""
        draft = self.result([], size)
        partial = PartialResult(draft.name, params=draft.params, source=draft.source, size=size, save=save)
        res = self.result(self.sweep(size, on_rows=partial.update, **given), size)
        if save:
            save_result(res)
        return res


def report(args: argparse.Namespace, results, columns: Sequence[str] | dict | None = None, *,
           shown: list[dict] | None = None) -> None:
    """Print each result (a ``BenchResult`` or name -> result) as one table (``columns``: one list, or
    one per name; ``shown``: rows of a target's own view of one result in its place), save it unless
    ``--no-save`` (where not saved yet), and write ``--json OUT`` (one result: its object; several:
    name -> result)."""
    many = isinstance(results, dict)
    for name, res in (results.items() if many else [(base_name(results.name), results)]):
        cols = columns.get(name) if isinstance(columns, dict) else columns
        print(f"{res.name} ({res.source}):")
        print(format_table(res.rows if shown is None else shown, columns=cols))
        if not args.no_save:
            print(f"saved {res.path or save_result(res)}")
    if args.json:
        write_json(args.json, {k: r.to_json() for k, r in results.items()} if many else results.to_json())
        print(f"wrote {args.json}")


# -- the one table format ----------------------------------------------------------------------------------

#: rows shown before the rest folds into ``<details>``
MAX_ROWS = 10

_TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0))  # unit, ns per unit
_SUFFIX_NS = {"_ns": 1.0, "_us": 1e3, "_ms": 1e6, "_s": 1e9}
_TABLE_STYLE = ("border-collapse:collapse;font-size:12px;max-width:100%;table-layout:auto;margin:4px 0")
_CELL_STYLE = "white-space:normal;overflow-wrap:anywhere;padding:2px 6px;border-bottom:1px solid #e5e5e5"


def sig3(value) -> str:
    """``value`` with three significant figures, without exponent notation: ``11739.05 -> "11,700"``,
    ``0.0012345 -> "0.00123"``; trailing zeros only where rounding made them (``6.9965 -> "7.00"``, an exact
    ``5.0 -> "5"``); None / NaN -> ``""``."""
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
    if "." in text and abs(rounded - v) <= 1e-9 * abs(v):  # nothing rounded away (a unit's conversion aside)
        text = text.rstrip("0").rstrip(".")
    return text


def _is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _median(values: list[float]) -> float:
    s = sorted(abs(v) for v in values)
    return s[len(s) // 2] if s else 0.0


def time_unit(values_ns: list[float]) -> tuple[str, float]:
    """The unit (``s``, ``ms``, ``us`` or ``ns``) that the median of ``values_ns`` reads best in, and
    its size in ns: the largest unit in which the median is at least 1."""
    med = _median(values_ns)
    return next(((unit, scale) for unit, scale in _TIME_UNITS if med >= scale), ("ns", 1.0))


def duration(ns: float) -> str:
    """A time in ns as a reader reads it: three significant figures in the unit that suits it (``21.4 us``)."""
    unit, scale = time_unit([ns])
    return f"{sig3(ns / scale)} {unit}"


def _words(name: str) -> str:
    return name.replace("_", " ").strip()


def column_format(name: str, values, unit: str | None = None) -> tuple[str, callable]:
    """The header and a cell formatter for column ``name`` holding ``values`` (see the module text);
    ``unit`` (``s``, ``ms``, ``us``, ``ns``) puts a time column in that unit whatever its values."""
    nums = [float(v) for v in values if _is_number(v)]
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
    if ("speedup" in name or name.startswith("vs_") or "_vs_" in name or name.endswith("_ratio") or name == "ratio") \
            and nums:
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

    def __str__(self) -> str:
        """The table as fixed-width text (every row), for a terminal."""
        if not self.cells:
            return "(no rows)"
        rows = [self.headers, *self.cells]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.headers))]
        return "\n".join("  ".join(c.rjust(w) if a == "right" else c.ljust(w)
                                   for c, w, a in zip(r, widths, self._aligns())).rstrip() for r in rows)


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
        names = list(dict.fromkeys(k for r in records for k in r))
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
