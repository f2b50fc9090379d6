"""The report index page: machine, date, device, commit and one row per notebook.

Each row says whether the notebook's numbers were measured on a GPU, measured on a
CPU, simulated or interpreted (the sources it declared), where it executed (machine,
device, labkit commit), which labkit commits the recorded results it read come from
(an unknown commit or one with uncommitted changes is flagged), and where it failed if
it did. Plain HTML with inline CSS: it loads nothing.
"""

from __future__ import annotations

import html

_COLOURS = {
    "measured-gpu": "#1b7f3a",
    "measured-cpu": "#1f5f99",
    "simulated": "#b35900",
    "interpreted": "#6b4c9a",
}

#: what each source means (the legend of the index and of every page)
SOURCE_MEANINGS = {
    "measured-gpu": "timed on a real GPU: this machine's, or recorded on the machine a result names",
    "measured-cpu": "timed on a real CPU: this machine's, or recorded on the machine a result names",
    "simulated": "produced by a model of the hardware, not a measurement",
    "interpreted": "Triton kernels run by the interpreter: correctness only, not speed",
}

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
.badge { color: white; padding: 1px 7px; border-radius: 4px; margin-right: 4px; font-size: 12px; }
.ok { color: #1b7f3a; font-weight: bold; }
.failed { color: #b00020; font-weight: bold; }
code { background: #f4f4f4; padding: 0 3px; }
.flag { color: #b00020; font-weight: bold; }
.results { font-size: 90%; }
.muted { color: #777; }
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def source_badge(source: str) -> str:
    """An inline badge for one source name."""
    colour = _COLOURS.get(source, "#555")
    return f'<span class="badge" data-source="{_e(source)}" style="background:{colour}">{_e(source)}</span>'


def commit_label(commit: str | None) -> str:
    """A commit as shown on the index: unknown and ``+dirty`` commits are flagged in words."""
    from labkit.results import commit_status

    status = commit_status(commit)
    if status == "unknown":
        return '<span class="flag" data-commit="unknown">commit unknown</span>'
    label = f'<code data-commit="{_e(status)}">{_e(commit)}</code>'
    if status == "dirty":
        label += ' <span class="flag">uncommitted changes</span>'
    return label


def _ran_on(nb: dict) -> str:
    if not nb.get("machine") and not nb.get("device"):
        return '<span class="muted">not recorded</span>'
    created = str(nb.get("created") or "")[:16].replace("T", " ")
    when = f'<br><span class="muted">{_e(created)}</span>' if created else ""
    return (f'<b>{_e(nb.get("device"))}</b> on <code>{_e(nb.get("machine"))}</code><br>'
            f'labkit {commit_label(nb.get("labkit_commit"))}{when}')


def _results_from(nb: dict) -> str:
    results = nb.get("results")
    if results is None or (not results and not nb.get("machine")):
        return '<span class="muted">not recorded</span>'
    if not results:
        return '<span class="muted">none read</span>'
    by_commit: dict[str, list[str]] = {}
    for r in results:
        by_commit.setdefault(str(r.get("labkit_commit") or "unknown"), []).append(f"{r.get('machine')}/{r.get('name')}")
    items = "".join(
        f'<li>{commit_label(commit)}: {_e(", ".join(names))}</li>' for commit, names in by_commit.items()
    )
    return f'<ul class="results">{items}</ul>'


def _notebook_row(nb: dict) -> str:
    link = f'<a href="{_e(nb["html"])}">{_e(nb["title"])}</a>' if nb.get("html") else _e(nb["title"])
    if nb.get("ok"):
        status = '<span class="ok">ok</span>'
    else:
        err = nb.get("error") or {}
        where = f"cell {err['cell']}" if err.get("cell") is not None else "kernel"
        first = f" <code>{_e(err.get('first_line'))}</code>" if err.get("first_line") else ""
        status = f'<span class="failed">failed</span> at {where}{first}: {_e(err.get("error"))}'
    sources = "".join(source_badge(s) for s in nb.get("sources", [])) or '<span class="muted">not declared</span>'
    return (
        f'<tr data-notebook="{_e(nb["name"])}"><td><code>{_e(nb["name"])}</code></td><td>{link}</td>'
        f"<td>{sources}</td><td>{_ran_on(nb)}</td><td>{_results_from(nb)}</td>"
        f"<td>{status}</td><td>{float(nb.get('seconds', 0)):.1f}</td></tr>"
    )


def render_index(meta: dict) -> str:
    """The index page for a report manifest (see ``labkit.report.build.build_report``)."""
    machine = meta.get("machine", {})
    machine_rows = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in machine.items() if v is not None
    )
    notebooks = meta.get("notebooks", [])
    n_ok = sum(1 for nb in notebooks if nb.get("ok"))
    rows = "".join(_notebook_row(nb) for nb in notebooks)
    legend = "".join(f"<li>{source_badge(s)} {_e(m)}</li>" for s, m in SOURCE_MEANINGS.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>labkit report</title><style>{_CSS}</style></head>
<body>
<h1>labkit report</h1>
<p>Every lab notebook executed headless on <b>{_e(machine.get('slug'))}</b> (device <b>{_e(meta.get('device'))}</b>,
size <b>{_e(meta.get('size'))}</b>) on {_e(meta.get('created'))},
labkit commit {commit_label(meta.get('labkit_commit'))}.
{n_ok} of {len(notebooks)} notebooks ran to the end.</p>
<h2>Notebooks</h2>
<table id="notebooks">
<tr><th>notebook</th><th>title</th><th>numbers on the page</th><th>executed on</th>
<th>recorded results read, by labkit commit</th><th>status</th><th>seconds</th></tr>
{rows}
</table>
<ul class="legend">{legend}</ul>
<h2>Machine</h2>
<table id="machine">{machine_rows}</table>
<p class="muted">Recorded results live in <code>data/results/&lt;machine&gt;/</code>; pages that compare machines
read them from there.</p>
</body></html>
"""
