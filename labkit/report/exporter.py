"""The lab's page format as an nbconvert exporter: ``labkit_html``.

:class:`LabkitHTMLExporter` is registered under the ``nbconvert.exporters`` entry point,
so JupyterLab's *File > Save and Export Notebook As* menu and ``jupyter nbconvert --to
labkit_html`` produce the page ``labkit report`` writes (the report uses this class too).
The page loads nothing from the network: nbconvert's lab template without MathJax and
mermaid, plotly's CDN MathJax tags stripped, the widget state embedded and drawn by the
widget renderer that labkit carries (:mod:`labkit.report.assets`): inlined in a single
exported file (require.js as a ``data:`` URL, the renderer gzip-compressed and unpacked by
the browser, as plotly.js is), or linked from ``static_url`` when the report shares one copy
between its pages. Where an asset is missing the export refuses with one line naming the fix
(:class:`labkit.report.assets.MissingAssetError`; from ``jupyter nbconvert``, that line and
exit status 2); a page never names a CDN. A header,
folded into one line (``<details>``), shows the sources of the page's numbers (measured-gpu,
measured-cpu, simulated, interpreted) and the run's provenance: where it executed, which labkit
commit, and, from ``labkit report``, the labkit commits of the recorded results it read.

Cell tags the page honours (JupyterLab shows every cell as it is): ``remove-input`` /
``hide-input`` leave a cell's input out and keep its outputs (a set-up cell, a page's answer
box), ``remove-cell`` leaves the cell out; the notebook's ``parameters`` cell is left out where
``labkit report`` injected the values it ran with (``injected-parameters``), so it shows once.
"""

from __future__ import annotations

import base64
import copy
import html
import re
import sys
from pathlib import Path

from jinja2 import DictLoader
from nbconvert import HTMLExporter
from traitlets import Unicode

from labkit.report import assets
from labkit.report.index import SOURCE_MEANINGS, commit_label, source_badge

SOURCES_METADATA_KEY = "labkit_sources"  # same key as labkit.viz.notebook (not imported: no plotly here)

# The lab template without MathJax and mermaid (both would load from a CDN), with require.js
# and the widget renderer as the exporter provides them (nbconvert's own block falls back to a CDN).
_TEMPLATE_NAME = "labkit_offline.html.j2"
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_requirejs -%}{{ resources.labkit_require_js }}{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}
{%- if "widgets" in nb.metadata -%}{{ resources.labkit_widget_renderer }}{%- endif -%}
{%- endblock jupyter_widgets -%}
"""
#: id of the element holding the compressed widget renderer in a single-file page
RENDERER_ELEMENT_ID = "labkit-widget-renderer"
# The widget renderer of a single-file page: base64 of its gzip in a data element, unpacked with the
# browser's DecompressionStream once the document is parsed (where nbconvert's loader starts it)
# and run from a blob: URL, as a script with a src, the way the renderer expects to be loaded.
_INLINE_RENDERER = """<script type="application/gzip;base64" id="%(id)s">%(b64)s</script>
<script>
(function () {
  function start() {
    var bin = atob(document.getElementById("%(id)s").textContent.trim());
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    new Response(stream).blob().then(function (text) {
      var s = document.createElement("script");
      s.src = URL.createObjectURL(new Blob([text], {type: "text/javascript"}));
      document.body.appendChild(s);
    }).catch(function (e) { console.error("labkit: could not unpack the widget renderer", e); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
</script>"""
_LINKED_RENDERER = """<script>
document.addEventListener("DOMContentLoaded", function () {
  var s = document.createElement("script");
  s.src = "%s";
  document.body.appendChild(s);
});
</script>"""
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
        exported = f"exported on {slug} from a Jupyter kernel"
        where = (f"Executed in a Jupyter kernel{when}; exported on <code>{html.escape(str(slug))}</code> "
                 f"with labkit {commit_label(labkit_commit())}.")
    results = (run or {}).get("results") or []
    line = [", ".join(sources) or "no declared sources",
            f"executed on {run.get('device')} ({run.get('machine')})" if run else exported]
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
    """Leave out what the page does not show, in place: the cells tagged :data:`REMOVE_CELL_TAGS`;
    the input of cells tagged :data:`HIDE_INPUT_TAGS` (a cell left with nothing to show goes
    altogether); and the notebook's own ``parameters`` cell where ``labkit report`` injected the
    values it ran with after it (``injected-parameters``: shown once, with the values used)."""
    tags_of = [set(c.get("metadata", {}).get("tags", [])) for c in nb.cells]
    injected = any("injected-parameters" in t for t in tags_of)
    kept = []
    for cell, tags in zip(nb.cells, tags_of):
        if tags & REMOVE_CELL_TAGS or (injected and "parameters" in tags):
            continue
        if tags & HIDE_INPUT_TAGS:
            if cell.cell_type == "code" and not cell.get("outputs"):
                continue
            cell.metadata["transient"] = {"remove_source": True}
        kept.append(cell)
    nb.cells = kept


def _refuse(exc: assets.MissingAssetError):
    """From ``jupyter nbconvert``: the one line and exit status 2 (nbconvert would print a
    traceback); elsewhere (``labkit report``, JupyterLab's server, Python) raise it."""
    from nbconvert.nbconvertapp import NbConvertApp

    if NbConvertApp.initialized():
        print(f"labkit_html: {exc}", file=sys.stderr)
        raise SystemExit(2)
    raise exc


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

    def _page_assets(self, with_widgets: bool) -> dict[str, str]:
        """The template's ``labkit_require_js`` and ``labkit_widget_renderer`` (inlined or linked)."""
        if self.static_url:
            base = self.static_url.rstrip("/")
            return {"labkit_require_js": f'<script src="{base}/{assets.STATIC_REQUIRE_JS}"></script>',
                    "labkit_widget_renderer": _LINKED_RENDERER % f"{base}/{assets.STATIC_RENDERER}"}
        try:
            assets.check(with_renderer=with_widgets)
        except assets.MissingAssetError as exc:
            _refuse(exc)
        require = base64.b64encode(assets.require_js()).decode("ascii")
        out = {"labkit_require_js": f'<script src="data:text/javascript;base64,{require}"></script>',
               "labkit_widget_renderer": ""}
        if with_widgets:
            b64 = base64.b64encode(assets.renderer_gzip()).decode("ascii")
            out["labkit_widget_renderer"] = _INLINE_RENDERER % {"id": RENDERER_ELEMENT_ID, "b64": b64}
        return out

    def from_notebook_node(self, nb, resources=None, **kw):
        """The page for ``nb`` (left unchanged); ``resources["labkit_run"]`` adds the report's provenance."""
        import nbformat

        nb = copy.deepcopy(nb)
        strip_remote_scripts(nb)
        run = (resources or {}).get("labkit_run")
        apply_cell_tags(nb)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(provenance_html(nb, run)))
        resources = dict(resources or {}, **self._page_assets("widgets" in nb.metadata))
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

