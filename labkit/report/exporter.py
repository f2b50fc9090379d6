"""The lab's page format as an nbconvert exporter: ``labkit_html``.

:class:`LabkitHTMLExporter` is registered under the ``nbconvert.exporters`` entry point,
so JupyterLab's *File > Save and Export Notebook As* menu and ``jupyter nbconvert --to
labkit_html`` produce the page ``labkit report`` writes (the report uses this class too).
The page loads nothing from the network: nbconvert's lab template without MathJax and
mermaid, plotly's CDN MathJax tags stripped, the widget state embedded and drawn by the
widget renderer from ``node_modules`` (inlined as ``data:`` URLs in a single exported file,
or linked from ``static_url`` when the report shares one copy between its pages). A header
shows the sources of the page's numbers (measured-gpu, measured-cpu, simulated,
interpreted) and the run's provenance: where it executed, which labkit commit, and, from
``labkit report``, the labkit commits of the recorded results it read.
"""

from __future__ import annotations

import base64
import copy
import html
import logging
import os
import re
from pathlib import Path

from jinja2 import DictLoader
from nbconvert import HTMLExporter
from traitlets import Unicode

from labkit.report.index import SOURCE_MEANINGS, commit_label, source_badge
from labkit.results import REPO_ROOT

logger = logging.getLogger(__name__)

SOURCES_METADATA_KEY = "labkit_sources"  # same key as labkit.viz.notebook (not imported: no plotly here)
NODE_MODULES_ENV = "LABKIT_NODE_MODULES"
#: the assets a page needs, relative to node_modules and to ``static_url``
REQUIRE_JS = "requirejs/require.js"
WIDGET_RENDERER = "html-manager/embed-amd.js"
_NODE_PATHS = {REQUIRE_JS: "requirejs/require.js", WIDGET_RENDERER: "@jupyter-widgets/html-manager/dist/embed-amd.js"}

# The lab template without MathJax and mermaid (both would load from a CDN).
_TEMPLATE_NAME = "labkit_offline.html.j2"
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
_REMOTE_SCRIPT = re.compile(r"""<script[^>]*\ssrc=["']?(?:https?:)?//[^>]*>\s*</script>""", re.I)


def notebook_sources(nb) -> list[str]:
    """Sources declared with ``declare_sources`` (output metadata), in order, unique."""
    seen: list[str] = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            for s in o.get("metadata", {}).get(SOURCES_METADATA_KEY, []) or []:
                if s not in seen:
                    seen.append(s)
    return seen


def strip_remote_scripts(nb) -> int:
    """Remove ``<script src="http...">`` tags from HTML outputs and saved widget state
    (figures shown in an Output widget live there); return how many.

    plotly's notebook renderer adds a MathJax script from a CDN to every figure
    (hard-coded); offline it only fails to load, so the exported page drops it.
    """
    counter = [0]

    def scrub(obj):
        if isinstance(obj, str):
            if "<script" not in obj:
                return obj
            new, n = _REMOTE_SCRIPT.subn("", obj)
            counter[0] += n
            return new
        if isinstance(obj, list):
            return [scrub(x) for x in obj]
        if isinstance(obj, dict):
            return {k: scrub(v) for k, v in obj.items()}
        return obj

    widgets = nb.metadata.get("widgets")
    if widgets:
        import nbformat

        nb.metadata["widgets"] = nbformat.from_dict(scrub(dict(widgets)))
    removed = counter[0]
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
    """The page header: the sources of its numbers with their meaning, and where it ran.

    ``run`` (from ``labkit report``): ``machine``, ``device``, ``labkit_commit`` and
    ``results`` (see :func:`labkit.report.provenance.results_read`). Without it (an export
    from JupyterLab), the machine and labkit commit are the exporting checkout's.
    """
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
            by_commit: dict[str, list[str]] = {}
            for r in results:
                by_commit.setdefault(str(r.get("labkit_commit")), []).append(f"{r.get('machine')}/{r.get('name')}")
            rows = "".join(f"<li>{commit_label(c)}: {html.escape(', '.join(n))}</li>" for c, n in by_commit.items())
            where += f"<p>Recorded results read, by labkit commit:</p><ul>{rows}</ul>"
        else:
            where += " It read no recorded result."
    else:
        from labkit.device import describe_machine
        from labkit.results import labkit_commit

        slug = describe_machine("cpu").get("slug", "unknown")
        where = (f"Executed in a Jupyter kernel{when}; exported on <code>{html.escape(str(slug))}</code> "
                 f"with labkit {commit_label(labkit_commit())}.")
    return (f'<div class="labkit-provenance" style="border:1px solid #ccc;padding:6px 10px;font-size:90%">'
            f"{legend}<p>{where}</p></div>")


def node_modules_dir() -> Path:
    """Where the page assets come from: ``$LABKIT_NODE_MODULES`` or the checkout's ``node_modules``."""
    env = os.environ.get(NODE_MODULES_ENV)
    return Path(env) if env else REPO_ROOT / "node_modules"


def _data_url(path: Path) -> str:
    return "data:text/javascript;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


class LabkitHTMLExporter(HTMLExporter):
    """nbconvert's HTML exporter writing the lab's offline page (``--to labkit_html``)."""

    export_from_notebook = "Lab page (offline HTML)"  # the name in JupyterLab's export menu

    static_url = Unicode(
        "", help="URL folder holding requirejs/require.js and html-manager/embed-amd.js; "
                 "empty: inline both into the page (a single file that works anywhere)",
    ).tag(config=True)

    plotly = Unicode(
        "inline", help="inline: plotly.js compressed into the page (the page budget); "
                       "shared: left whole for export_page to move next to the page",
    ).tag(config=True)

    def __init__(self, *args, **kw):
        kw.setdefault("template_name", "lab")
        kw.setdefault("template_file", _TEMPLATE_NAME)
        kw.setdefault("extra_loaders", [DictLoader({_TEMPLATE_NAME: _TEMPLATE})])
        kw.setdefault("mathjax_url", "")
        super().__init__(*args, **kw)

    def _asset_url(self, name: str) -> str:
        if self.static_url:
            return f"{self.static_url.rstrip('/')}/{name}"
        path = node_modules_dir() / _NODE_PATHS[name]
        if not path.is_file():
            logger.warning("%s is missing (run `npm ci`): widgets and figures may not render offline", path)
            return ""
        return _data_url(path)

    def from_notebook_node(self, nb, resources=None, **kw):
        """The page for ``nb`` (left unchanged); ``resources["labkit_run"]`` adds the report's provenance."""
        import nbformat

        nb = copy.deepcopy(nb)
        strip_remote_scripts(nb)
        run = (resources or {}).get("labkit_run")
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(provenance_html(nb, run)))
        self.require_js_url = self._asset_url(REQUIRE_JS)
        self.widget_renderer_url = self._asset_url(WIDGET_RENDERER)
        body, resources = super().from_notebook_node(nb, resources=resources, **kw)
        if self.plotly == "inline":  # JupyterLab's export menu lands here too: same page budget
            from labkit.report.pagesize import shrink_page

            body = shrink_page(body)
        return body, resources


def export_page(nb, path: Path, *, static_url: str = "", run: dict | None = None, plotly: str = "inline") -> None:
    """Write ``nb`` as the lab's offline page at ``path`` (atomically).

    ``plotly``: ``inline`` keeps plotly.js in the page, compressed; ``shared`` links one
    ``plotly.min.js`` in the ``static_url`` folder next to the page (:mod:`labkit.report.pagesize`).
    """
    from labkit.fileio import write_atomic
    from labkit.report.pagesize import PLOTLY_MODES, shrink_page

    if plotly not in PLOTLY_MODES:
        raise ValueError(f"unknown plotly mode {plotly!r}: use one of {', '.join(PLOTLY_MODES)}")
    exporter = LabkitHTMLExporter(static_url=static_url, plotly=plotly)
    resources = {"metadata": {"name": Path(path).stem}, "labkit_run": run}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    if plotly == "shared":
        static = static_url or "_static"
        body = shrink_page(body, plotly=plotly, static_dir=Path(path).parent / static, static_url=static)
    write_atomic(path, body)

