"""Notebook texts: no markdown line renders as a heading it was not meant to be.

Markdown cells are read with jupytext's own py:percent reader (so ``# #40143 ...`` in the file
is the cell line ``#40143 ...``) and parsed with markdown-it (CommonMark), the parser behind
jupytext's own markdown handling. Two kinds of line are flagged:

- paragraph text that starts with ``#``: CommonMark keeps ``#40143 took ...`` as text, but
  renderers without the space rule (Python-Markdown, pedantic marked, Markdown.pl) turn it
  into a page-wide heading;
- a heading that is not the first line of its cell (a stray ``# text`` inside a paragraph
  becomes a heading in every renderer), and any setext heading (a ``---``/``===`` line under
  text), which is almost always a rule or an underline meant as decoration.
"""

from __future__ import annotations

import json
from pathlib import Path

import jupytext
import pytest
from markdown_it import MarkdownIt

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.py"))
_MD = MarkdownIt("commonmark")


def heading_problems(markdown: str) -> list[str]:
    """One message per line of ``markdown`` (a cell's text) that renders as an unintended heading."""
    lines = markdown.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    problems = []
    tokens = _MD.parse(markdown)
    for k, tok in enumerate(tokens):
        if tok.type == "heading_open":
            line_no = tok.map[0]
            if tok.markup in ("=", "-"):
                problems.append(f"line {line_no + 1}: setext heading (text underlined by {tok.markup * 3}): "
                                f"{lines[line_no].strip()!r}")
            elif line_no != first:
                problems.append(f"line {line_no + 1}: heading inside the cell (start a new cell for it): "
                                f"{lines[line_no].strip()!r}")
        elif tok.type == "inline" and k and tokens[k - 1].type == "paragraph_open":
            start = tokens[k - 1].map[0]
            for j, text in enumerate(tok.content.splitlines()):
                if text.lstrip(" ").startswith("#"):
                    problems.append(f"line {start + j + 1}: text starting with '#' renders as a heading in "
                                    f"some renderers: {text.strip()!r}")
    return problems


def notebook_heading_problems(path: Path) -> list[str]:
    """``heading_problems`` over every markdown cell of a py:percent notebook, prefixed by the cell."""
    nb = jupytext.read(path, fmt="py:percent")
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            out += [f"{path.name} cell {i}: {p}" for p in heading_problems(cell.source)]
    return out


# ---- the checker on hand-worked cells --------------------------------------------------------

def test_hash_number_at_line_start_is_flagged():
    text = "Per-call cost of each method. Still torch ops after\n#40143 (the next bubble)."
    (msg,) = heading_problems(text)
    assert msg.startswith("line 2:") and "#40143 (the next bubble)." in msg
    # the same sentence with the reference mid-line is fine
    assert heading_problems("Per-call cost; still torch ops after #40143\n(the next bubble).") == []


def test_headings_at_cell_start_are_fine_and_may_start_with_a_pr_number():
    assert heading_problems("# 06 · Machines side by side\n\nEvery machine ...") == []
    assert heading_problems("### #40143 before and after: `tensor` vs `list`\nText.") == []
    assert heading_problems("\n## What is recorded") == []


def test_heading_inside_a_cell_is_flagged():
    (msg,) = heading_problems("## Title\nSome text,\n# then a stray comment line\nmore text.")
    assert msg.startswith("line 3:") and "heading inside the cell" in msg
    (msg,) = heading_problems("Text first.\n\n### A heading later")
    assert msg.startswith("line 3:")


def test_setext_underline_is_flagged_but_a_rule_after_a_blank_line_is_not():
    (msg,) = heading_problems("## Title\nA line of text\n---")
    assert "setext" in msg and "line 2:" in msg
    assert heading_problems("## Title\nA paragraph.\n\n---\n\nAnother.") == []


def test_code_and_inline_code_are_not_flagged():
    text = "## Run it\n```bash\n# a shell comment\n#40143\n```\n\n    # indented code\n\nA `#define` is fine."
    assert heading_problems(text) == []


def test_jupytext_strips_the_comment_marker_before_parsing():
    src = ("# %% [markdown]\n# # Title\n#\n# Text ending with the PR number\n# #40143 (next bubble).\n\n"
           "# %%\nx = 1  # #40143 in code is not markdown\n")
    nb = jupytext.reads(src, fmt="py:percent")
    md = [c for c in nb.cells if c.cell_type == "markdown"]
    assert md[0].source.splitlines()[-1] == "#40143 (next bubble)."
    (msg,) = heading_problems(md[0].source)
    assert msg.startswith("line 4:")   # title, blank line, text, then the PR number


# ---- the lab's notebooks ---------------------------------------------------------------------

def test_there_are_notebooks_to_check():
    assert len(NOTEBOOKS) >= 8


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_unintended_headings(path):
    problems = notebook_heading_problems(path)
    assert not problems, "\n".join(problems)


# ---- figure titles: long names shortened, the full name on hover -----------------------------

def test_shorten_keeps_head_and_tail():
    from labkit.viz.labels import short_name, shorten

    assert shorten("abcdefghij", 10) == "abcdefghij"
    assert shorten("abcdefghijk", 10) == "abcde…hijk"          # 5 + ellipsis + 4 = 10 characters
    assert shorten("abcdefghijk", 3) == "a…k"
    assert short_name("/root/out/w/traces/run/labkit.1795992744743902038.pt.trace.json.gz", 30) == \
        "labkit.17959927….trace.json.gz"                      # 15 + ellipsis + 14 = 30 characters
    assert short_name("short.json", 30) == "short.json"
    assert short_name(None) == "trace"
    with pytest.raises(ValueError):
        shorten("abc", 2)


def _trace_with_long_name(tmp_path, name):
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 50},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
           "args": {"correlation": 1}},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": 5,
           "args": {"stream": 7, "correlation": 1, "device": 0}}]
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}))
    return p


def test_timeline_titles_are_bounded_and_full_names_go_to_hover(tmp_path):
    from labkit.trace import Trace
    from labkit.viz.labels import CAPTION_NAME, NAME_CHARS
    from labkit.viz.timeline import plot_timeline, plot_timeline_pair

    long_name = "labkit.fast-cursor-per_layer-async.1795992754131407379.pt.trace.json"
    an = Trace(_trace_with_long_name(tmp_path, long_name))
    fig = plot_timeline(an)
    title = fig.layout.title.text.split("<br>")[0]
    assert long_name not in title and "…" in title
    assert len(title) <= NAME_CHARS + len(" (NVIDIA H200)")
    (cap,) = [a for a in fig.layout.annotations if a.name == CAPTION_NAME]
    assert cap.hovertext == long_name
    assert fig.layout.updatemenus and cap.xshift < 0          # moved left of the step dropdown
    # a caller's own title is kept and nothing is captioned
    fig = plot_timeline(an, title="tensor/loop")
    assert fig.layout.title.text.startswith("tensor/loop")
    assert not [a for a in fig.layout.annotations if a.name == CAPTION_NAME]

    short = Trace(_trace_with_long_name(tmp_path, "b.json"))
    pair = plot_timeline_pair(an, short)
    subtitles = [a.text for a in pair.layout.annotations if a.name != CAPTION_NAME]
    assert len(subtitles) == 2 and all(len(t) <= 60 for t in subtitles)
    (cap,) = [a for a in pair.layout.annotations if a.name == CAPTION_NAME]
    assert cap.hovertext == long_name                   # only the name that was shortened
    assert not pair.layout.updatemenus and not cap.xshift


def test_engine_bars_title_bounds_the_profile_description():
    from labkit.viz.lab.engine import PROFILE_CHARS, plot_engine_bars
    from labkit.viz.labels import CAPTION_NAME

    origin = "measured on NVIDIA H200 (2026-11-29) with labkit bench engine --write-profile, model gemma4-e4b-like"
    rows = [{"variant": v, "source": "simulated", "profile_origin": origin, "tokens_per_s_median": t,
             "tokens_per_s_window": t, "device_idle_frac": 0.5, "median_ns": 1e6, "host_schedule_ns": 1e5}
            for v, t in (("tensor/loop", 100.0), ("list/loop", 200.0))]
    fig = plot_engine_bars(rows)
    assert origin not in fig.layout.title.text
    assert len(fig.layout.title.text) <= len("Engine per variant - simulated (profile: )") + PROFILE_CHARS
    (cap,) = [a for a in fig.layout.annotations if a.name == CAPTION_NAME]
    assert cap.hovertext == origin
    measured = [dict(r, source="measured-gpu", profile_origin=None) for r in rows]
    assert not plot_engine_bars(measured).layout.annotations
