"""The report index page, a front page: the lab's answers, where to start, then one row per notebook.

More: docs/reference.md, ``labkit.report.index``.
"""

from __future__ import annotations

import re

from labkit.report.frontpage import APPENDICES, NOTEBOOK_SUMMARIES, _e, findings_table, start_here
from labkit.report.provenance import by_commit
from labkit.results import commit_status
from labkit.viz.notebook import SOURCE_COLOURS

#: what each source means (the legend of the index and of every page)
SOURCE_MEANINGS = {
    "measured-gpu": "timed on a real GPU: this machine's, or recorded on the machine a result names",
    "measured-cpu": "timed on a real CPU: this machine's, or recorded on the machine a result names",
    "simulated": "produced by a model of the hardware, not a measurement",
    "interpreted": "Triton kernels run by the interpreter: correctness only, not speed",
}

#: longest "what it shows" line (characters); the whole sentence stays on hover
SUMMARY_CHARS = 76
#: the flags of recorded results, by commit status: (short form, what it means and why it happens),
#: as ``labkit.results`` stamps them: ``unknown`` where no commit could be read, ``+dirty`` where
#: ``labkit/`` had uncommitted changes
RESULT_FLAGS = {
    "unknown": ("commit unknown", "no labkit commit stamped: recorded before results carried their commit, "
                                  "or in a copy of the tree without .git and without LABKIT_COMMIT. The figures "
                                  "are as recorded; only the labkit version that made them cannot be named"),
    "dirty": ("uncommitted", "made from a tree with uncommitted changes to labkit/ (a commit ending in +dirty): "
                             "the commit named is near, not exact"),
}
#: the flags of the run of a page itself, as the top line says them
RUN_FLAGS = {"unknown": "ran at an unknown labkit commit", "dirty": "ran with uncommitted changes to labkit"}

_CSS = """
body { font-family: system-ui, sans-serif; font-size: 14px; line-height: 1.4; margin: 1.5em auto;
       max-width: 1240px; padding: 0 12px; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0; }
#notebooks { width: 100%; table-layout: fixed; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: #f4f4f4; font-weight: 600; }
#notebooks .num { width: 3em; white-space: nowrap; }
#notebooks .nb { width: 52%; }
#notebooks .src { width: 19%; }
#notebooks .ran { width: 10%; }
#notebooks .st { width: 6%; }
#notebooks .sec { width: 4.5em; text-align: right; }
.title { font-weight: 600; }
.machine { white-space: nowrap; }
.shows { color: #555; font-size: 12.5px; }
.badge { display: inline-block; color: white; padding: 0 6px; border-radius: 4px; margin: 1px 3px 1px 0;
         font-size: 11.5px; line-height: 17px; white-space: nowrap; }
.ok { color: #1b7f3a; font-weight: bold; }
.failed { color: #b00020; font-weight: bold; }
code { background: #f4f4f4; padding: 0 3px; }
.flag { color: #b00020; font-weight: bold; }
.chip { color: #b00020; font-size: 12px; white-space: nowrap; }
.muted { color: #777; }
.small { font-size: 12.5px; }
details summary { cursor: pointer; }
.st summary { white-space: nowrap; }
details ul { margin: 4px 0 2px 0; padding-left: 1.1em; font-size: 12.5px; }
#flags { margin: 0.4em 0; }
.lead { font-size: 15px; max-width: 1000px; }
#findings { width: 100%; table-layout: fixed; }
#answer { max-width: 60em; }
#findings .method { width: 38%; }
#findings .lab { width: 28%; }
#findings .pub { width: 10%; }
#findings .where { width: 18%; }
#findings .page { width: 4em; }
#start ol { margin-top: 0; }
"""


def source_badge(source: str) -> str:
    """An inline badge for one source name."""
    colour = SOURCE_COLOURS.get(source, "#555")
    return f'<span class="badge" data-source="{_e(source)}" style="background:{colour}">{_e(source)}</span>'


def commit_label(commit: str | None, *, short: bool = False, quiet: bool = False) -> str:
    """A commit as shown on the index: unknown and ``+dirty`` commits are flagged in words.

    ``short`` (a row's cell): the first 7 characters (the whole commit on hover) and smaller flags;
    ``quiet``: the flag words in grey (a listing whose flags the note above the table explains).
    """
    status = commit_status(commit)
    flag = "muted" if quiet else ("chip" if short else "flag")
    if status == "unknown":
        return f'<span class="{flag}" data-commit="unknown">commit unknown</span>'
    if short:
        label = f'<code class="small" title="{_e(commit)}" data-commit="{_e(status)}">{_e(str(commit)[:7])}</code>'
    else:
        label = f'<code data-commit="{_e(status)}">{_e(commit)}</code>'
    if status == "dirty":
        label += f' <span class="{flag}">{"uncommitted" if short else "uncommitted changes"}</span>'
    return label


# -- what a notebook shows -----------------------------------------------------------------------

_MARKUP = [(re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"), (re.compile(r"[*_`]+"), ""), (re.compile(r"\s+"), " ")]
_SAYS_WHAT = ("This page ", "This notebook ")
_SENTENCE = re.compile(r"(?<=[.!?:])\s+(?=[A-Z(])")


def _plain(text: str) -> str:
    for pattern, repl in _MARKUP:
        text = pattern.sub(repl, text)
    return text.strip()


def shorten_words(text: str, max_chars: int = SUMMARY_CHARS) -> str:
    """``text`` cut at a word boundary to at most ``max_chars`` characters, with ``…`` when cut."""
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars - 1]
    if " " in cut:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,;:-(") + "…"


def notebook_summary(nb) -> str:
    """One sentence on what a notebook shows, from its first markdown cell ("This page ..." first); "" if none."""
    cell = next((c for c in nb.cells if c.cell_type == "markdown"), None)
    if cell is None:
        return ""
    body = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith("#"))
    paragraphs = [_plain(p) for p in re.split(r"\n\s*\n", body) if p.strip() and not p.lstrip().startswith("-")]
    sentences = [s for p in paragraphs for s in _SENTENCE.split(p) if s]
    chosen = next((s for s in sentences if s.startswith(_SAYS_WHAT)), None)
    if chosen:  # "This page measures ..." -> "Measures ..."
        chosen = re.sub(r"^This (page|notebook) (\w)", lambda m: m.group(2).upper(), chosen)
    return (chosen or (sentences[0] if sentences else "")).rstrip(":")


# -- flags ---------------------------------------------------------------------------------------

def _result_statuses(nb: dict) -> dict[str, list[str]]:
    """Flagged commit status -> ``machine/name`` of the results ``nb`` read with it."""
    out: dict[str, list[str]] = {}
    for r in nb.get("results") or []:
        status = r.get("commit_status") or commit_status(r.get("labkit_commit"))
        if status in RESULT_FLAGS:
            out.setdefault(status, []).append(f"{r.get('machine')}/{r.get('name')}")
    return out


def _flags_of(nb: dict) -> set[tuple[str, str]]:
    """``("result", status)`` / ``("run", status)`` flags of one notebook's row."""
    flags = {("result", s) for s in _result_statuses(nb)}
    if nb.get("machine") or nb.get("device"):
        status = commit_status(nb.get("labkit_commit"))
        if status in RUN_FLAGS:
            flags.add(("run", status))
    return flags


def common_flags(notebooks: list[dict]) -> set[tuple[str, str]]:
    """The flags every page carries: result flags shared by every page that read results, run
    flags shared by every page that says where it ran. Empty when a kind has no such page."""
    readers = [nb for nb in notebooks if nb.get("results")]
    ran = [nb for nb in notebooks if nb.get("machine") or nb.get("device")]
    common: set[tuple[str, str]] = set()
    if readers:
        common |= {f for f in set.intersection(*(_flags_of(nb) for nb in readers)) if f[0] == "result"}
    if ran:
        common |= {f for f in set.intersection(*(_flags_of(nb) for nb in ran)) if f[0] == "run"}
    return common


def _provenance(notebooks: list[dict], common: set[tuple[str, str]]) -> str:
    """The index's folded provenance line: the recorded results each page read, by commit, every flagged
    one said once with why (:data:`RESULT_FLAGS`), and the run flags every page carries (empty when no
    page read a result nor carries a flag)."""
    parts = []
    for status, (short, meaning) in RESULT_FLAGS.items():
        files = list(dict.fromkeys(f for nb in notebooks for f in _result_statuses(nb).get(status, [])))
        if files:
            what = f"{len(files)} recorded result{'s' if len(files) != 1 else ''}"
            parts.append(f'<b data-flag="{status}">{_e(short.capitalize())}</b>: {what} '
                         f'({_e(", ".join(files))}): {_e(meaning)}.')
    for kind, status in sorted(common):
        if kind == "run":
            commits = sorted({str(nb.get("labkit_commit")) for nb in notebooks if nb.get("machine") or nb.get("device")})
            parts.append(f'Every page {RUN_FLAGS[status]} (<code>{_e(", ".join(commits))}</code>).')
    pages = [_results_item(nb) for nb in notebooks if nb.get("results")]
    if not parts and not pages:
        return ""
    n = len({(r.get("machine"), r.get("name")) for nb in notebooks for r in nb.get("results") or []})
    flagged = sum(1 for p in parts if "data-flag" in p)
    summary = f"Provenance: {n} recorded result{'s' if n != 1 else ''} read by the pages, by labkit commit" + \
        (f" ({flagged} kind{'s' if flagged != 1 else ''} of flag)" if flagged else "")
    body = (f"<p>{' '.join(parts)}</p>" if parts else "") + (f"<ul>{''.join(pages)}</ul>" if pages else "")
    return f'<details id="flags" class="small"><summary>{_e(summary)}</summary>{body}</details>'


def _results_item(nb: dict) -> str:
    """One page's line of the provenance fold: the results it read, grouped by commit."""
    groups = "; ".join(f"{commit_label(c, quiet=True)}: {_e(', '.join(n))}" for c, n in by_commit(nb["results"]).items())
    return f'<li data-notebook="{_e(nb["name"])}"><b>{_e(str(nb["name"]).split("_", 1)[0])}</b> {groups}</li>'


# -- one row -------------------------------------------------------------------------------------

def _short_title(nb: dict) -> str:
    """A notebook's title without its leading number."""
    return re.sub(r"^\d\d\s*[·.:-]\s*", "", str(nb.get("title") or nb["name"]))


def _title_cell(nb: dict) -> str:
    title = _short_title(nb)
    link = f'<a class="title" href="{_e(nb["html"])}">{_e(title)}</a>' if nb.get("html") else \
        f'<span class="title">{_e(title)}</span>'
    written = NOTEBOOK_SUMMARIES.get(str(nb["name"]))
    summary = written or str(nb.get("summary") or "")
    shown = summary if written else shorten_words(summary)
    shows = f'<br><span class="shows" title="{_e(summary)}">{_e(shown)}</span>' if summary else ""
    return f'<td class="nb">{link}{shows}</td>'


def _ran_cell(nb: dict, report_commit: str | None) -> str:
    if not nb.get("machine") and not nb.get("device"):
        return '<td class="ran"><span class="muted">not recorded</span></td>'
    text = f'<b>{_e(nb.get("device"))}</b> on<br><code class="machine">{_e(nb.get("machine"))}</code>'
    commit = nb.get("labkit_commit")
    if commit != report_commit:  # the report's own commit is in the header
        text += f"<br>{commit_label(commit, short=True)}"
    return f'<td class="ran">{text}</td>'


def _status_cell(nb: dict) -> str:
    if nb.get("ok"):
        return '<td class="st"><span class="ok">ok</span></td>'
    err = nb.get("error") or {}
    where = f"cell {err['cell']}" if err.get("cell") is not None else "kernel"
    first = f" <code>{_e(err.get('first_line'))}</code>" if err.get("first_line") else ""
    at = "" if err.get("cell") is None and not err.get("first_line") else f"at {where}{first}: "  # not a cell's
    return (f'<td class="st"><details><summary><span class="failed">failed</span></summary>'
            f'<span class="small">{at}{_e(err.get("error"))}</span></details></td>')


def _notebook_row(nb: dict, report_commit: str | None = None) -> str:
    number = str(nb["name"]).split("_", 1)[0]
    sources = "".join(source_badge(s) for s in nb.get("sources", [])) or '<span class="muted">not declared</span>'
    return (
        f'<tr data-notebook="{_e(nb["name"])}"><td class="num"><code title="{_e(nb["name"])}">{_e(number)}</code></td>'
        f'{_title_cell(nb)}<td class="src">{sources}</td>{_ran_cell(nb, report_commit)}'
        f'{_status_cell(nb)}<td class="sec">{float(nb.get("seconds", 0)):.1f}</td></tr>'
    )


def _appendix_links(notebooks: list[dict]) -> str:
    """The footer's links to the appendix pages of this report (with their status where not ok)."""
    links = []
    for nb in notebooks:
        if nb["name"] in APPENDICES and nb.get("html"):
            failed = "" if nb.get("ok") else ' <span class="failed">failed</span>'
            title = re.sub(r"^Appendix:\s*", "", _short_title(nb))  # the footer says it once
            links.append(f'<a href="{_e(nb["html"])}">{_e(title)}</a>{failed}')
    return f"Appendix: {', '.join(links)}. " if links else ""


def _findings(meta: dict) -> dict:
    """The manifest's findings, or those of the results store where it carries none."""
    if isinstance(meta.get("findings"), dict):
        return meta["findings"]
    from labkit.report.findings import lab_findings

    return lab_findings()


def render_index(meta: dict) -> str:
    """The index page for a report manifest (see ``labkit.report.build.build_report``)."""
    from labkit.facts import PR40143

    machine = meta.get("machine", {})
    machine_rows = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in machine.items() if v is not None
    )
    notebooks = meta.get("notebooks", [])
    n_ok = sum(1 for nb in notebooks if nb.get("ok"))
    common = common_flags(notebooks)
    rows = "".join(_notebook_row(nb, meta.get("labkit_commit")) for nb in notebooks if nb["name"] not in APPENDICES)
    legend = "".join(f"<li>{source_badge(s)} {_e(m)}</li>" for s, m in SOURCE_MEANINGS.items())
    pages = {str(nb["name"]): str(nb["html"]) for nb in notebooks if nb.get("html")}
    titles = {str(nb["name"]): _short_title(nb) for nb in notebooks}
    pub = PR40143
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>labkit report</title><style>{_CSS}</style></head>
<body>
<h1>labkit report</h1>
<p class="lead">A performance lab for vLLM's multimodal serving path. Its question: why did vLLM #40143 (the
scheduler's placeholder reads from a tensor to a Python list) gain {pub.throughput_gain:.2f}x output tokens/s
on {_e(pub.name.replace("vllm#40143 ", ""))} (mean TPOT {pub.before.mean_tpot_ms} -&gt; {pub.after.mean_tpot_ms} ms)?
The answer and its evidence, read from the recorded results:</p>
{findings_table(_findings(meta), pages, source_badge)}
{start_here(pages, titles)}
<h2>The notebooks</h2>
<p>Every lab notebook executed headless on <b>{_e(machine.get('slug'))}</b> (device <b>{_e(meta.get('device'))}</b>,
size <b>{_e(meta.get('size'))}</b>) on {_e(meta.get('created'))},
labkit commit {commit_label(meta.get('labkit_commit'))}.
{n_ok} of {len(notebooks)} notebooks ran to the end.</p>
{_provenance(notebooks, common)}
<table id="notebooks">
<colgroup><col class="num"><col class="nb"><col class="src"><col class="ran"><col class="st">
<col class="sec"></colgroup>
<tr><th>#</th><th>notebook: what it shows</th><th>numbers</th><th>executed on</th>
<th>status</th><th class="sec">s</th></tr>
{rows}
</table>
<ul class="legend small">{legend}</ul>
<h2>Machine</h2>
<table id="machine">{machine_rows}</table>
<footer id="appendix"><p>{_appendix_links(notebooks)}Recorded results live in
<code>data/results/&lt;machine&gt;/</code>.</p></footer>
</body></html>
"""
