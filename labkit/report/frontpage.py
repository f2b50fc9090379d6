"""The index's front matter: the lab's answer and its evidence, where to start, one sentence per notebook."""

from __future__ import annotations

import html

#: notebook stem -> what it shows, one sentence (the index shows it whole: keep it to one line)
NOTEBOOK_SUMMARIES = {
    "00_environment": "The machine, and what one tensor read and one small pageable copy cost on it.",
    "01_placeholder_scheduler": "Times #40143's placeholder reads in the scheduler's decode step, and beyond.",
    "02_idle_bubbles": "A mini engine on a simulated and a real H200: when host time becomes GPU idle.",
    "03_h2d_prefix_ranges": "Counts and times #38794's per-layer prefix-range copies against one per step.",
    "04_prefix_attention_kernel": "A Triton prefix-LM attention kernel: its mask, its checks, its roofline.",
    "05_trace_analysis": "Finds the idle bubbles in real GPU profiles and what the host did during them.",
    "06_compare_gpus": "Appendix: which results each machine recorded, and their numbers side by side.",
    "07_next_bubble": "The next host cost in vLLM 0.33: image ranges rebuilt every step, and a patch.",
    "08_inside_vllm": "The answer: #40143's published table, predicted with nothing fitted.",
}

#: notebooks that are appendices: linked from the index's footer, not listed among the notebooks
APPENDICES = ("06_compare_gpus",)

#: the page to open first, and the two after it: (notebook, its title where the report lacks it, why)
FIRST_PAGES = (
    ("08_inside_vllm", "Inside vLLM", "the answer: the published table beside the one step model's prediction"),
    ("01_placeholder_scheduler", "Placeholder ranges and the multimodal scheduler",
     "the PR's own change at its shape (128 requests x 32 images), timed"),
    ("02_idle_bubbles", "Idle bubbles", "how host time turns into GPU idle, eager and under CUDA graphs"),
)

#: the one-minute path: (command, what it shows, how long it took on a 2-core CPU)
ONE_MINUTE = (
    ("labkit calibrate", "the unit cost behind #40143: one tensor read + int() against one list read",
     "about 4 s"),
    ("labkit bench mm", "the scheduler's decode step at 128 x 32, tensor against list",
     "about 7 s"),
    ("labkit analyze tests/data/labkit-h200-tensor-loop-none-async.trimmed.pt.trace.json.gz",
     "an H200 profile of the lab's engine before the fix: the host-wait idle and the scheduler's "
     "tensor reads under it", "about 1 s"),
)


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _page_link(name: str, pages: dict[str, str], text: str | None = None) -> str:
    """A link to the page of notebook ``name`` where this report has it, else its name alone."""
    text = text if text is not None else name[:2]
    if name in pages:
        return f'<a href="{_e(pages[name])}">{_e(text)}</a>'
    return f'<span class="muted" title="not in this report">{_e(text)}</span>'


def findings_table(found: dict, pages: dict[str, str], badge) -> str:
    """The answer (``<p id="answer">``) and ``<table id="findings">``, one row per evidence
    (:func:`labkit.report.findings.lab_findings`); ``pages``: notebook stem -> page file of this
    report; ``badge``: source -> badge HTML."""
    answer = found.get("answer") or f"No answer recorded: {found.get('why_no_answer')}."
    rows = []
    for e in found.get("evidence", []):
        where = ("" if e["missing"] else f'{badge(e["source"])} <code class="small">{_e(e["machine"])}</code>'
                 f'<br><span class="small muted">{_e(e["result"])}</span>')
        rows.append(f'<tr data-finding="{_e(e["key"])}"><td class="method">{_e(e["what"])}</td>'
                    f'<td class="lab"><b>{_e(e["figure"])}</b></td><td class="pub">{_e(e["published"])}</td>'
                    f'<td class="where">{where}</td><td class="page">{_page_link(e["notebook"], pages)}</td></tr>')
    return (f'<p id="answer">{_e(answer)}</p>'
            '<table id="findings"><colgroup><col class="method"><col class="lab"><col class="pub">'
            '<col class="where"><col class="page"></colgroup>'
            "<tr><th>evidence</th><th>the lab's figure</th><th>published</th><th>made on</th><th>page</th></tr>"
            + "".join(rows) + "</table>")


def start_here(pages: dict[str, str], titles: dict[str, str]) -> str:
    """The "Start here" section: the pages to open in order and the one-minute path."""
    first = []
    for i, (name, title, why) in enumerate(FIRST_PAGES):
        label = f"{name[:2]} · {titles.get(name, title)}"
        lead = "Open " if i == 0 else ("then " if i == 1 else "and ")
        first.append(f"{lead}{_page_link(name, pages, label)}: {_e(why)}")
    steps = "".join(f"<li><code>{_e(cmd)}</code>: {_e(what)} ({_e(took)})</li>" for cmd, what, took in ONE_MINUTE)
    return (f'<section id="start"><h2>Start here</h2><p>{"; ".join(first)}.</p>'
            '<p>The one-minute path, on any CPU (times on a 2-core cloud CPU; <code>--no-save</code> '
            'leaves the results store alone):</p>'
            f'<ol class="small">{steps}</ol></section>')
