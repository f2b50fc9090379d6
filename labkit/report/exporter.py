"""The lab's page format as an nbconvert exporter: ``labkit_html``.

More: docs/reference.md, ``labkit.report.exporter``.
"""

from __future__ import annotations

import copy
import html
import re
from pathlib import Path

from jinja2 import DictLoader
from nbconvert import HTMLExporter
from traitlets import Unicode

from labkit.report.index import SOURCE_MEANINGS, commit_label, source_badge
from labkit.report.provenance import by_commit
from labkit.viz.notebook import SOURCES_METADATA_KEY

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: what an exported page shows in place of a live control (an ipywidget needs a running kernel)
LIVE_NOTE = ('<p class="labkit-live-note">The live controls of this section (they measure on your machine) '
             'appear when the notebook runs in JupyterLab: <code>make lab</code>.</p>')

# The lab template without MathJax, mermaid, require.js and the widget manager (each would load
# from a CDN; the pages need none of them), every input folded behind a "code" click.
_TEMPLATE_NAME = "labkit_offline.html.j2"
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block extra_css -%}<style>
details.labkit-code > summary { font-size: 12px; color: #777; cursor: pointer; margin: 2px 0 2px 4px; }
details.labkit-code:not([open]) { margin-bottom: 2px; }
.labkit-live-note { color: #555; font-style: italic; }
</style>{%- endblock extra_css -%}
{%- block input_group -%}<details class="labkit-code"><summary>code</summary>{{ super() }}</details>{%- endblock input_group -%}
"""
_REMOTE_SCRIPT = re.compile(r"""<script[^>]*\ssrc=["']?(?:https?:)?//[^>]*>\s*</script>""", re.I)


def notebook_sources(nb) -> list[str]:
    """Sources declared with ``declare_sources`` (output metadata), in order, unique."""
    return list(dict.fromkeys(s for c in nb.cells for o in c.get("outputs", [])
                              for s in o.get("metadata", {}).get(SOURCES_METADATA_KEY, []) or []))


def strip_remote_scripts(nb) -> int:
    """Remove ``<script src="http...">`` tags (plotly's CDN MathJax) from HTML outputs; return how many."""
    removed = 0
    for c in nb.cells:
        for o in c.get("outputs", []):
            data = o.get("data", {})
            text = data.get("text/html")
            if text is None:
                continue
            text = "".join(text) if isinstance(text, list) else text
            new, n = _REMOTE_SCRIPT.subn("", text)
            if n:
                data["text/html"] = new
                removed += n
    return removed


def _execution_dates(nb) -> tuple[str | None, str | None]:
    """First and last kernel timestamps recorded in the cells (nbclient, or JupyterLab's
    "record timing" setting), as ``YYYY-MM-DD HH:MM``; None where none is recorded."""
    stamps = sorted(
        str(v) for c in nb.cells for k, v in c.get("metadata", {}).get("execution", {}).items()
        if k.startswith(("iopub.", "shell."))
    )
    if not stamps:
        return None, None
    return stamps[0][:16].replace("T", " "), stamps[-1][:16].replace("T", " ")


def provenance_html(nb, run: dict | None = None) -> str:
    """The page header: the sources of its numbers with their meaning, and where it ran (``run``: the report's)."""
    sources = notebook_sources(nb)
    if sources:
        items = "".join(f"<li>{source_badge(s)} {html.escape(SOURCE_MEANINGS.get(s, ''))}</li>" for s in sources)
        legend = f"<p>Numbers on this page:</p><ul>{items}</ul>"
    else:
        legend = "<p>This page declares no measured, simulated or interpreted numbers.</p>"
    first, last = _execution_dates(nb)
    when = f" between {first} and {last} (UTC)" if first else ""
    if run:
        where = (f"Executed by <code>labkit report</code> on <b>{html.escape(str(run.get('device')))}</b> on "
                 f"<code>{html.escape(str(run.get('machine')))}</code>{when}, labkit "
                 f"{commit_label(run.get('labkit_commit'))}.")
        results = run.get("results") or []
        if results:
            rows = "".join(f"<li>{commit_label(c)}: {html.escape(', '.join(n))}</li>"
                           for c, n in by_commit(results).items())
            where += f"<p>Recorded results read, by labkit commit:</p><ul>{rows}</ul>"
        else:
            where += " It read no recorded result."
    else:
        from labkit.device import describe_machine
        from labkit.results import labkit_commit

        slug = describe_machine("cpu").get("slug", "unknown")
        exported = f"exported on {slug} from a Jupyter kernel"
        where = (f"Executed in a Jupyter kernel{when}; exported on <code>{html.escape(str(slug))}</code> "
                 f"with labkit {commit_label(labkit_commit())}.")
    results = (run or {}).get("results") or []
    line = [", ".join(sources) or "no declared sources",
            f"{run.get('size')} size, executed on {run.get('device')} ({run.get('machine')})" if run else exported]
    if results:
        commits = {str(r.get("labkit_commit")) for r in results}
        line.append(f"{len(results)} recorded result{'s' * (len(results) != 1)} read, "
                    f"from {len(commits)} labkit commit{'s' * (len(commits) != 1)}")
    summary = html.escape(" · ".join(line))
    return (f'<details class="labkit-provenance" style="border:1px solid #ccc;padding:4px 10px;font-size:90%">'
            f"<summary>Provenance: {summary}</summary>{legend}<p>{where}</p></details>")


#: cell tags whose input the page leaves out (the cell's outputs stay); JupyterLab shows the input
HIDE_INPUT_TAGS = frozenset({"remove-input", "hide-input", "remove_input", "hide_input"})
#: cell tags that leave the whole cell out of the page
REMOVE_CELL_TAGS = frozenset({"remove-cell", "remove_cell"})


def apply_cell_tags(nb) -> None:
    """Leave out, in place, the cells and inputs the page does not show, and each live control (:data:`LIVE_NOTE`)."""
    kept = []
    for cell in nb.cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & REMOVE_CELL_TAGS or tags & {"parameters", "injected-parameters"}:
            continue
        for i, out in enumerate(cell.get("outputs", [])):
            if WIDGET_VIEW in out.get("data", {}):
                cell.outputs[i] = {"output_type": "display_data", "data": {"text/html": LIVE_NOTE}, "metadata": {}}
        if tags & HIDE_INPUT_TAGS:
            if cell.cell_type == "code" and not cell.get("outputs"):
                continue
            cell.metadata["transient"] = {"remove_source": True}
        kept.append(cell)
    nb.cells = kept
    nb.metadata.pop("widgets", None)


class LabkitHTMLExporter(HTMLExporter):
    """nbconvert's HTML exporter writing the lab's offline page (``--to labkit_html``)."""

    export_from_notebook = "Lab page (offline HTML)"  # the name in JupyterLab's export menu

    static_url = Unicode(
        "", help="URL of the folder a report's pages share plotly.js and the page style from (written by "
                 "export_page); empty: a single page that carries both",
    ).tag(config=True)

    def __init__(self, *args, **kw):
        kw.setdefault("template_name", "lab")
        kw.setdefault("template_file", _TEMPLATE_NAME)
        kw.setdefault("extra_loaders", [DictLoader({_TEMPLATE_NAME: _TEMPLATE})])
        kw.setdefault("mathjax_url", "")
        kw.setdefault("exclude_output_prompt", True)
        super().__init__(*args, **kw)

    def from_notebook_node(self, nb, resources=None, **kw):
        """The page for ``nb`` (left unchanged); ``resources["labkit_run"]`` adds the report's provenance."""
        import nbformat

        from labkit.report.pagesize import shrink_page

        nb = copy.deepcopy(nb)
        strip_remote_scripts(nb)
        run = (resources or {}).get("labkit_run")
        apply_cell_tags(nb)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(provenance_html(nb, run)))
        body, resources = super().from_notebook_node(nb, resources=resources, **kw)
        if not self.static_url:  # a single page (JupyterLab's export menu lands here too)
            body = shrink_page(body)
        return body, resources


def export_page(nb, path: Path, *, static_url: str = "", run: dict | None = None) -> None:
    """Write ``nb`` as the lab's offline page at ``path`` (atomically): a single page, or with
    ``static_url`` one that shares plotly.js and its style from that folder next to it."""
    from labkit.fileio import write_atomic
    from labkit.report.pagesize import shrink_page

    exporter = LabkitHTMLExporter(static_url=static_url)
    resources = {"metadata": {"name": Path(path).stem}, "labkit_run": run}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    if static_url:
        body = shrink_page(body, static_dir=Path(path).parent / static_url, static_url=static_url)
    write_atomic(path, body)
