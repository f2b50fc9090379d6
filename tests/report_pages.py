"""What each notebook's page in the lab report must show, and the check that compares a page with it.

``PAGES`` has one entry per notebook (``notebooks/NN_name.py`` -> page ``NN_name.html``):

- ``headings``: text that defines the page, each found in one of its h1-h3 headings;
- ``min_figures``: how many plotly figures with data it draws at least (a "no result"
  placeholder, the empty figure a plot function returns when its results are missing, does
  not count, and no page may show one unless ``placeholders`` allows it, or one of its
  ``optional`` results is not recorded in the store: then one placeholder per such result);
- ``numbers``: a reader that takes the results recorded in the store the page was built
  from (before the build) and returns key numbers the page must show, picked by meaning
  (result name, machine, variant), never typed here. A ``figure`` number must be among the
  data of the page's figures (converted to the unit the figure draws); a ``text`` number
  must be printed on the page (rounded as printed, at least four significant digits).

Adding a notebook: one ``PAGES`` entry, and a reader below for its key numbers. A report page
without an entry fails the content test, so a new page is never left unchecked.
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from labkit.results import QUICK_SUFFIX, BenchResult, base_name

NS_PER_US, NS_PER_MS = 1e3, 1e6


@dataclass(frozen=True)
class KeyNumber:
    """A number the page must show: where (``figure`` data or printed ``text``, there with at least
    ``digits`` significant digits) and what it is."""

    what: str
    value: float
    where: str = "figure"
    digits: int = 4


class Recorded:
    """The recorded results a page read, one per (machine, result): the full recording where
    there is one, else the quick one."""

    def __init__(self, results: Iterable[BenchResult]):
        best: dict[tuple[str, str], BenchResult] = {}
        for r in results:
            key = (r.slug, base_name(r.name))
            if key not in best or best[key].name.endswith(QUICK_SUFFIX):
                best[key] = r
        self.results = [best[k] for k in sorted(best)]

    def has(self, name: str) -> bool:
        """Whether any machine records a ``name`` result."""
        return any(base_name(r.name) == name for r in self.results)

    def find(self, name: str, *, machine: str | None = None, source: str | None = None) -> list[BenchResult]:
        """Every recorded ``name`` result (of ``machine`` / ``source``); LookupError when there is none,
        so an expectation that no longer matches the store says so instead of checking nothing."""
        hits = [r for r in self.results if base_name(r.name) == name and machine in (None, r.slug)
                and source in (None, r.source)]
        if not hits:
            where = "".join(f" {k}={v}" for k, v in (("machine", machine), ("source", source)) if v)
            raise LookupError(f"no recorded {name!r} result{where} in the store: update tests/report_pages.py")
        return hits

    def rows(self, name: str, *, machine: str | None = None, source: str | None = None,
             **match) -> list[tuple[BenchResult, dict]]:
        """``(result, row)`` for every row of the ``name`` results whose columns equal ``match``."""
        out = [(r, row) for r in self.find(name, machine=machine, source=source) for row in r.rows
               if all(row.get(k) == v for k, v in match.items())]
        if not out:
            raise LookupError(f"no row {match} in the recorded {name!r} results: update tests/report_pages.py")
        return out


# -- key numbers per page, read from the recorded results --------------------------------------

def _tensor_reads(rec: Recorded) -> list[KeyNumber]:
    """Per machine its calibrated tensor read, ``int(tensor[i])`` (ns per element, as drawn)."""
    return [KeyNumber(f"{r.slug} calibration: int(tensor[i]) ns/element", row["median_ns"])
            for r, row in rec.rows("calibration", kind="cpu", variant="tensor_index_int")]


def calibration_numbers(rec: Recorded) -> list[KeyNumber]:
    """Notebook 00: per machine the tensor read."""
    return _tensor_reads(rec)


def placeholder_numbers(rec: Recorded) -> list[KeyNumber]:
    """Notebook 01: every recorded decode-step combination (ms per step, as drawn)."""
    return [KeyNumber(f"{r.slug} mm_decode_step {row['combo']}: ms", row["median_ns"] / NS_PER_MS)
            for r, row in rec.rows("mm_decode_step")]


def engine_numbers(rec: Recorded) -> list[KeyNumber]:
    """Notebook 02: the engine measured on a GPU, per variant: output tokens/s and median step (ms)."""
    out = []
    for r, row in rec.rows("engine", source="measured-gpu"):
        out.append(KeyNumber(f"{r.slug} engine {row['variant']}: tokens/s", row["tokens_per_s"]))
        out.append(KeyNumber(f"{r.slug} engine {row['variant']}: median step ms", row["median_ns"] / NS_PER_MS))
    return out


def h2d_numbers(rec: Recorded) -> list[KeyNumber]:
    """Notebook 03: per machine the per-layer step (ms, as drawn); the GPU's idle us per step per strategy;
    the GPU machines' pageable 256 B copy alone, host time (calibration, drawn in us)."""
    out = [KeyNumber(f"{r.slug} h2d_step per_layer {row['model']}: ms", row["median_ns"] / NS_PER_MS)
           for r, row in rec.rows("h2d_step", variant="per_layer")]
    out += [KeyNumber(f"{r.slug} calibration: pageable 256 B copy, host us", row["median_ns"] / NS_PER_US)
            for r, row in rec.rows("calibration", kind="gpu", variant="h2d_pageable", metric="host_ns", size_bytes=256)]
    out += [KeyNumber(f"{r.slug} h2d_gpu_idle {row['variant']} {row['model']}: idle us/step", row["idle_us_per_step"])
            for r, row in rec.rows("h2d_gpu_idle")]
    return out


def attention_numbers(rec: Recorded) -> list[KeyNumber]:
    """Notebook 04: the GPU benchmark's TFLOP/s per case and variant (sweep configurations left out)."""
    return [KeyNumber(f"{r.slug} attn_bench {row['variant']} {row['case']}: TFLOP/s", row["tflops"])
            for r, row in rec.rows("attn_bench", source="measured-gpu")
            if "[" not in row["variant"] and row.get("tflops") is not None]


def trace_numbers(rec: Recorded) -> list[KeyNumber]:
    """Notebook 05: the analyzer benchmark's table, as printed to three significant digits (MB/s of JSON
    and peak memory over the JSON's size, per trace and tool)."""
    out = []
    for r, row in rec.rows("trace_bench"):
        what = f"{r.slug} trace_bench {row['trace']} {row['variant']}"
        out.append(KeyNumber(f"{what}: MB/s", row["mb_per_s"], "text", digits=2))
        out.append(KeyNumber(f"{what}: peak RSS / JSON", row["rss_over_json"], "text", digits=2))
    return out


def compare_numbers(rec: Recorded) -> list[KeyNumber]:
    """Notebook 06: every machine's tensor read (calibration) and per-layer prefix-range step (as drawn,
    side by side where several machines recorded them)."""
    return _tensor_reads(rec) + [KeyNumber(f"{r.slug} h2d_step per_layer {row['model']}: ns", row["median_ns"])
                                 for r, row in rec.rows("h2d_step", variant="per_layer")]


def next_bubble_numbers(rec: Recorded) -> list[KeyNumber]:
    """Notebook 07: installed vs patched ``compute_mm_prefix_ranges`` per batch shape (ms, as drawn); the
    real-server A/B is shown once, in notebook 08."""
    return [KeyNumber(f"{r.slug} vllm_prefix_ranges {row['variant']} {row['num_requests']}x{row['images']}: ms",
                      row["median_ns"] / NS_PER_MS)
            for r, row in rec.rows("vllm_prefix_ranges")]


def inside_vllm_numbers(rec: Recorded) -> list[KeyNumber]:
    """Notebook 08: the steady full-batch step's device and host per arm on the named GPU under the
    result's regime (ms, as printed to three significant digits);
    where recorded, the census's schedule and prepare_inputs per point and variant (ms, as drawn), the
    input stages per image (ms), the real-server A/B's mean TPOT per variant and repeat (ms) and the real
    server's engine steps (ms)."""
    out = []
    for r in rec.find("pr_table"):
        if r.size != "full":
            continue
        gpu = r.params["gpu"]
        out += [KeyNumber(f"{r.slug} pr_table {p['arm']} on {gpu}: full-batch {side} ms", p[f"{side}_ms"], "text", digits=2)
                for p in r.params["peaks"] if (p["gpu"], p["regime"]) == (gpu, r.params["regime"])
                for side in ("device", "host")]
    if rec.has("vllm_step"):
        out += [KeyNumber(f"{r.slug} vllm_step {row['variant']} {row['num_requests']}x{row['images']} {row['phase']}: ms",
                          row["median_us"] / NS_PER_US)
                for r in rec.find("vllm_step") for row in r.rows if row["phase"] in ("schedule", "prepare_inputs")]
    if rec.has("vllm_input"):
        out += [KeyNumber(f"{r.slug} vllm_input {row['stage']}: ms per image", row["per_image_median_us"] / NS_PER_US)
                for r in rec.find("vllm_input") for row in r.rows]
    if rec.has("vllm_ab"):
        out += [KeyNumber(f"{r.slug} vllm_ab {row['variant']} repeat {row.get('repeat')}: mean TPOT ms",
                          row["mean_tpot_us"] / NS_PER_US)
                for r in rec.find("vllm_ab") for row in r.rows if row.get("mean_tpot_us") is not None]
    if rec.has("vllm_serve_timeline"):  # every engine step's own time, as drawn
        out += [KeyNumber(f"{r.slug} vllm_serve_timeline {row['variant']} step {row['iteration']}: ms", row["elapsed_ms"])
                for r in rec.find("vllm_serve_timeline") for row in r.rows if row["kind"] == "step"]
    return out


@dataclass(frozen=True)
class PageExpectation:
    headings: tuple[str, ...]
    min_figures: int
    numbers: Callable[[Recorded], list[KeyNumber]]
    placeholders: int = 0  # "no result" figures always allowed
    optional: tuple[str, ...] = ()  # results a figure may lack: one placeholder allowed per one not recorded

    def allowed_placeholders(self, rec: Recorded) -> int:
        return self.placeholders + sum(not rec.has(name) for name in self.optional)


PAGES: dict[str, PageExpectation] = {
    "00_environment": PageExpectation(
        headings=("The machine and its unit costs", "Recorded on each machine", "Measured here, now, quick"),
        min_figures=1, numbers=calibration_numbers),
    "01_placeholder_scheduler": PageExpectation(
        headings=("Placeholder ranges and the multimodal scheduler", "One decode step at the PR's shape",
                  "From the scheduler's saving to the published gain"),
        min_figures=5, numbers=placeholder_numbers),
    "02_idle_bubbles": PageExpectation(
        headings=("Idle bubbles", "Under CUDA graphs", "The one step model on the mini engine",
                  "Measured on a GPU: recorded results", "How far is the simulator from the H200?"),
        min_figures=9, numbers=engine_numbers),
    "03_h2d_prefix_ranges": PageExpectation(
        headings=("Prefix ranges and host-to-device copies", "Recorded on a GPU", "a pageable copy makes the host wait",
                  "The four strategies",
                  "Measured here, now, quick", "Try it live"),
        min_figures=5, numbers=h2d_numbers),
    "04_prefix_attention_kernel": PageExpectation(
        headings=("A Triton prefix-LM attention kernel", "Recorded on a GPU", "The rule", "Try it live"),
        min_figures=5, numbers=attention_numbers),
    "05_trace_analysis": PageExpectation(
        headings=("Trace analysis", "A second real trace, from outside the lab", "How fast the analyzer is",
                  "What would a fix buy?"),
        min_figures=3, numbers=trace_numbers),  # two timelines and the idle breakdown
    "06_compare_gpus": PageExpectation(
        headings=("Appendix: every recorded result, by machine", "What each machine recorded", "Side by side"),
        min_figures=1, numbers=compare_numbers),
    "07_next_bubble": PageExpectation(
        headings=("The next bubble", "Recorded: installed against patched", "A GPU host is no faster", "Try it live"),
        min_figures=4, numbers=next_bubble_numbers),
    "08_inside_vllm": PageExpectation(
        headings=("Why #40143 gained 1.27x", "The table, and its gains", "The peaks",
                  "The one unknown of the PR's machine", "every phase of a real vLLM step", "the intake",
                  "What the whole run turns on", "The next host costs to hunt"),
        min_figures=1, numbers=inside_vllm_numbers,
        optional=("pr_table", "vllm_step", "vllm_input", "vllm_ab", "vllm_serve_timeline")),
}


# -- comparing a page with its expectation -------------------------------------------------------

#: in the browser: the page's headings, text (with the whole of each long table, folded behind a
#: click), and per figure its title, notes and trace data
PAGE_FACTS_JS = """
() => ({
  headings: Array.from(document.querySelectorAll('h1, h2, h3')).map(h => h.innerText.replace(/\\u00b6/g, '').trim()),
  text: [document.body.innerText,
         ...Array.from(document.querySelectorAll('details td')).map(td => td.textContent)].join('\\n'),
  figures: Array.from(document.querySelectorAll('.plotly-graph-div')).map(gd => {
    const layout = gd.layout || {};
    const title = layout.title && (layout.title.text !== undefined ? layout.title.text : layout.title);
    return {
      title: String(title || ''),
      notes: (layout.annotations || []).map(a => String(a.text || '')),
      traces: (gd.data || []).map(t => ({x: t.x, y: t.y, z: t.z, base: t.base, values: t.values})),
    };
  }),
})
"""

_ARRAY_KEYS = ("x", "y", "z", "base", "values")
_NUMBER = re.compile(r"(?<![\w.])[-+]?(\d+(?:\.(\d+))?)(?:e([-+]?\d+))?(?![\w.])", re.IGNORECASE)


def _decode(value) -> list:
    """A trace array as plotly.js holds it (a list, nested lists, or plotly's typed-array form
    ``{"dtype", "bdata"[, "shape"]}``) as a flat list of its items."""
    if isinstance(value, dict) and "bdata" in value:
        dtype = np.dtype(value["dtype"]).newbyteorder("<")  # plotly writes little-endian
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=dtype).tolist()
    if isinstance(value, (list, tuple)):
        return [item for v in value for item in _decode(v)]
    return [] if value is None else [value]


def figure_numbers(figure: dict) -> np.ndarray:
    """Every finite number in a figure's trace data (strings and categories left out)."""
    vals = [v for t in figure["traces"] for k in _ARRAY_KEYS for v in _decode(t.get(k))
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return np.array(vals, dtype=float)


#: in the browser: where the answer and the first figure are, every table's width against its room,
#: and the visible text nodes that say FAIL (none inside a closed <details> counts)
READER_FACTS_JS = r"""
() => {
  const top = el => el.getBoundingClientRect().top + window.scrollY;
  const answer = document.querySelector('.labkit-answer');
  const figure = document.querySelector('.plotly-graph-div');
  const page = document.documentElement.clientWidth;
  const tables = Array.from(document.querySelectorAll('table'))
    .filter(t => t.offsetParent !== null && t.getClientRects().length)
    .map(t => ({width: t.scrollWidth, room: Math.max(t.parentElement.clientWidth, 0), page: page,
                text: t.innerText.slice(0, 80)}));
  const fails = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!/\bFAIL\b/.test(n.nodeValue)) continue;
    const el = n.parentElement;
    if (!el || el.closest('script, style')) continue;
    const closed = el.closest('details:not([open])');
    if (closed && !el.closest('summary')) continue;
    if (!el.getClientRects().length) continue;
    fails.push(n.nodeValue.trim().slice(0, 100));
  }
  return {
    answer_top: answer ? top(answer) : null,
    answer_text: answer ? answer.innerText : '',
    figure_top: figure ? top(figure) : null,
    tables: tables,
    fails: fails,
  };
}
"""

#: in the browser: what the checks of this module read (see the module text)
PAGE_CHECK_FACTS_JS = r"""
() => {
  const box = document.querySelector('.labkit-answer');
  const shown = el => !el.closest('details:not([open])') && el.getClientRects().length > 0;
  // the box as a reader sees it: its tables, charts and closed folds left out, its source line kept
  let prose = '';
  if (box) {
    const seen = box.cloneNode(true);
    seen.querySelectorAll('table, .labkit-answer-bars, .plotly-graph-div, svg, details:not([open])').forEach(e => e.remove());
    document.body.appendChild(seen);
    prose = seen.innerText;
    seen.remove();
  }
  const after = [];
  if (box) {
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (!(box.compareDocumentPosition(n) & Node.DOCUMENT_POSITION_FOLLOWING) || box.contains(n)) continue;
      const el = n.parentElement;
      if (!el || el.closest('script, style, .jp-CodeCell .jp-InputArea, .plotly-graph-div')) continue;
      const shut = el.closest('details:not([open])');
      if (shut && !el.closest('summary')) continue;  // a closed fold: not text a reader sees
      after.push(n.nodeValue);
    }
  }
  const graphs = Array.from(document.querySelectorAll('.plotly-graph-div'));
  const strings = v => (Array.isArray(v) ? v.flat(3) : [v]).filter(x => typeof x === 'string');
  const figures = graphs.map((gd, i) => {
    const layout = gd.layout || {};
    const title = layout.title && (layout.title.text !== undefined ? layout.title.text : layout.title);
    const axes = Object.keys(layout).filter(k => /^[xy]axis/.test(k)).map(k => (layout[k].title || {}).text || '');
    return {
      index: i,
      below_answer: !!box && !!(box.compareDocumentPosition(gd) & Node.DOCUMENT_POSITION_FOLLOWING),
      drawn: !!gd.querySelector('.main-svg'),
      labels: [String(title || ''), ...axes, ...(layout.annotations || []).map(a => String(a.text || ''))]
        .concat((gd.data || []).flatMap(t => [String(t.name || ''), ...strings(t.x), ...strings(t.y), ...strings(t.text)])),
      traces: (gd.data || []).map(t => ({x: t.x, y: t.y, z: t.z, base: t.base, values: t.values, customdata: t.customdata})),
      controls: ((layout.sliders || []).length + (layout.updatemenus || []).length),
    };
  });
  const live = Array.from(document.querySelectorAll('h2')).find(h => /Try it live/.test(h.innerText));
  const live_figure = live ? graphs.findIndex(gd => live.compareDocumentPosition(gd) & Node.DOCUMENT_POSITION_FOLLOWING) : -1;
  const cells = Array.from(document.querySelectorAll('td')).filter(shown).map(td => td.innerText.trim());
  return {
    prose: prose,
    words: prose.split(/\s+/).filter(Boolean).length,
    evidence: after.join(' '),
    figures: figures,
    height: document.documentElement.scrollHeight,
    code_shown: Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputArea')).filter(shown).length,
    has_live: !!live,
    live_figure: live_figure,
    text_all: document.body.textContent,
    table_cells: cells,
    bad_cells: cells.filter(c => /^(nan|none)$/i.test(c)),
  };
}
"""


def has_data(figure: dict) -> bool:
    """Whether any trace of the figure holds points (a "no result" placeholder has no trace at all)."""
    return any(_decode(t.get(k)) for t in figure["traces"] for k in _ARRAY_KEYS)


def printed(value: float, text: str, digits: int = 4) -> bool:
    """Whether ``value`` is printed in ``text``: a number there with at least ``digits`` significant
    digits that equals ``value`` rounded to the digits printed (``8.113911e+08``, ``207282176``, ``1.221861``)."""
    for m in _NUMBER.finditer(text):
        shown_digits, decimals, exp = m.group(1), m.group(2) or "", int(m.group(3) or 0)
        if len(shown_digits.replace(".", "").lstrip("0")) < digits:
            continue
        shown = float(m.group(0))
        if abs(shown - value) <= 0.5 * 10.0 ** (exp - len(decimals)) * (1 + 1e-9):
            return True
    return False


def page_problems(name: str, facts: dict, expect: PageExpectation, rec: Recorded) -> list[str]:
    """What the page lacks against its expectation (empty: the page shows its content)."""
    problems = []
    headings = facts["headings"]
    for h in expect.headings:
        if not any(h in got for got in headings):
            problems.append(f"{name}: no heading with {h!r} (headings: {headings})")
    drawn = [f for f in facts["figures"] if has_data(f)]
    empty = [f for f in facts["figures"] if not has_data(f)]
    if len(drawn) < expect.min_figures:
        problems.append(f"{name}: {len(drawn)} figures with data, expected at least {expect.min_figures}")
    allowed = expect.allowed_placeholders(rec)
    if len(empty) > allowed:
        problems.append(f"{name}: {len(empty)} figures without data (allowed {allowed}): "
                        + "; ".join(f"{f['title'][:60]!r}: {' / '.join(f['notes'])[:100]!r}" for f in empty))
    pool = np.concatenate([figure_numbers(f) for f in drawn]) if drawn else np.array([])
    try:
        numbers = expect.numbers(rec)
    except LookupError as exc:
        return [*problems, f"{name}: {exc}"]
    if not numbers:
        problems.append(f"{name}: its reader found no key number in the recorded results")
    missing = []
    for key in numbers:
        if key.where == "figure":
            found = bool(np.isclose(pool, key.value, rtol=1e-9, atol=0.0).any())
        else:
            found = printed(key.value, facts["text"], key.digits)
        if not found:
            missing.append(f"{key.what} = {key.value!r} ({key.where})")
    if missing:
        problems.append(f"{name}: {len(missing)} of {len(numbers)} key numbers of the recorded results not shown, "
                        f"e.g. {'; '.join(missing[:4])}")
    return problems


# -- driving a figure's own controls (no kernel) -------------------------------------------------

def shown_data(page, graph: int) -> list:
    """The ``[x, y]`` of every trace figure ``graph`` shows now (a trace hidden by a control left out)."""
    return page.evaluate(
        "(i) => { const gd = document.querySelectorAll('.plotly-graph-div')[i];"
        " return gd._fullData.filter(t => t.visible === true).map(t => [Array.from(t.x || []), Array.from(t.y || [])]); }",
        graph)


def drive_control(page, graph: int, prefer: str = "slider") -> str | None:
    """Click one control inside figure ``graph`` as a reader does: a slider step other than the active one
    (``prefer="slider"``, where it has a slider) or a menu button other than the active one. Returns
    ``"slider"``, ``"menu"``, or None when the figure has no control."""
    gd = page.locator(".plotly-graph-div").nth(graph)
    gd.scroll_into_view_if_needed()
    layout = page.evaluate("(i) => { const l = document.querySelectorAll('.plotly-graph-div')[i].layout;"
                           " return {sliders: (l.sliders || []).map(s => [s.steps.length, s.active || 0]),"
                           " menus: (l.updatemenus || []).map(m => [m.buttons.length, m.active || 0, m.type || 'dropdown'])}; }",
                           graph)
    use_slider = layout["sliders"] and (prefer == "slider" or not layout["menus"])
    if use_slider:
        steps, active = layout["sliders"][0]
        target = 0 if active != 0 else steps - 1
        tick = gd.locator("g.slider-container rect.slider-tick-rect").nth(target).bounding_box()
        rail = gd.locator("g.slider-container rect.slider-rail-touch-rect").first.bounding_box()
        page.mouse.click(tick["x"] + tick["width"] / 2, rail["y"] + rail["height"] / 2)
        page.wait_for_timeout(300)
        return "slider"
    if layout["menus"]:
        buttons, active, kind = layout["menus"][0]
        target = 0 if active != 0 else buttons - 1
        container = gd.locator("g.updatemenu-container").first
        if kind == "dropdown":
            container.locator("g.updatemenu-header").click()
            container.locator("g.updatemenu-dropdown-button").nth(target).click()
        else:
            container.locator("g.updatemenu-button").nth(target).click()
        page.wait_for_timeout(300)
        return "menu"
    return None
