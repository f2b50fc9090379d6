"""The report builder: run every lab notebook headless and export offline HTML.

``labkit report`` takes each ``notebooks/NN_*.py`` (jupytext py:percent) in order,
converts it to a notebook in memory, injects the ``device`` and ``size`` parameters
after the cell tagged ``parameters``, executes it with nbclient (kernel working
directory: the notebooks folder, as in JupyterLab; widget state stored), and exports
one standalone HTML page per notebook plus ``index.html``. Pages load nothing from the
network: plotly.js is embedded by the notebooks' renderer, the widget renderer and
require.js are copied from ``node_modules`` into ``<out>/_static/``, MathJax and
mermaid are left out. A failing notebook is reported (cell index, first line, error)
on stderr and in the index, its partial page is still written, the others still run,
and the command exits 1 at the end.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.errors import UsageError
from labkit.fileio import write_atomic
from labkit.report.index import render_index
from labkit.results import REPO_ROOT, labkit_commit

logger = logging.getLogger(__name__)

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
NOTEBOOK_GLOB = "[0-9][0-9]_*.py"
SOURCES_METADATA_KEY = "labkit_sources"  # same key as labkit.viz.notebook (not imported: no plotly here)
SIZES = ("quick", "full")
MANIFEST = "report.json"
STATIC = "_static"

#: files copied from node_modules into <out>/_static (source dir -> target subdir)
_VENDOR = {
    "@jupyter-widgets/html-manager/dist": "html-manager",
    "requirejs": "requirejs",
}
WIDGET_RENDERER = f"{STATIC}/html-manager/embed-amd.js"
REQUIRE_JS = f"{STATIC}/requirejs/require.js"

# The lab template without MathJax and mermaid (both would load from a CDN).
_TEMPLATE_NAME = "labkit_offline.html.j2"
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


@dataclass
class CellError:
    """Where and why a notebook stopped: ``cell`` counts the notebook's own cells from 0."""

    cell: int | None
    first_line: str
    error: str

    def describe(self) -> str:
        where = f"cell {self.cell}" if self.cell is not None else "kernel"
        line = f" `{self.first_line}`" if self.first_line else ""
        return f"{where}{line}: {self.error}"


@dataclass
class NotebookRun:
    """The outcome of one notebook: page written, seconds taken, sources it declared."""

    name: str
    title: str
    html: str | None
    ok: bool
    seconds: float
    sources: list[str] = field(default_factory=list)
    error: CellError | None = None
    has_widgets: bool = False


def find_notebooks(notebooks_dir: Path | str = NOTEBOOKS_DIR, only: list[str] | None = None) -> list[Path]:
    """The ``NN_*.py`` notebooks in order; ``only`` keeps names given with or without ``.py``."""
    notebooks_dir = Path(notebooks_dir)
    if not notebooks_dir.is_dir():
        raise UsageError(f"no notebooks folder at {notebooks_dir}")
    found = sorted(notebooks_dir.glob(NOTEBOOK_GLOB))
    if only:
        wanted = {Path(o).name.removesuffix(".py") for o in only}
        missing = wanted - {p.stem for p in found}
        # a bare prefix like "00" also selects 00_environment
        by_prefix = {w for w in missing if any(p.stem.split("_", 1)[0] == w for p in found)}
        if missing - by_prefix:
            raise UsageError(f"no such notebook: {', '.join(sorted(missing - by_prefix))}")
        found = [p for p in found if p.stem in wanted or p.stem.split("_", 1)[0] in by_prefix]
    return found


def read_notebook(path: Path):
    """A jupytext py:percent file as an nbformat notebook."""
    import jupytext

    return jupytext.read(str(path))


def notebook_title(nb, default: str) -> str:
    """The first markdown heading of ``nb`` (without ``#``), else ``default``."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return default


def inject_parameters(nb, params: dict) -> int:
    """Insert a cell assigning ``params`` right after the ``parameters`` cell; return its index.

    Without a tagged cell the new cell goes first. The inserted cell is tagged
    ``injected-parameters`` (papermill's convention).
    """
    import nbformat

    source = "# Parameters\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    at = 0
    for i, c in enumerate(nb.cells):
        if "parameters" in c.get("metadata", {}).get("tags", []):
            at = i + 1
            break
    nb.cells.insert(at, cell)
    return at


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip():
            return line.strip()[:120]
    return ""


def _failed_cell(nb, exc: BaseException) -> tuple[int | None, str]:
    """Index and first line of the cell that failed: the one with an error output, else
    the last cell the kernel started (a timeout or a dead kernel)."""
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", [])):
            return i, _first_line(c.source)
    started = [
        i for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and "iopub.execute_input" in c.get("metadata", {}).get("execution", {})
    ]
    if started:
        return started[-1], _first_line(nb.cells[started[-1]].source)
    return None, ""


def _error_text(nb, exc: BaseException) -> str:
    for c in nb.cells:
        for o in c.get("outputs", []):
            if o.get("output_type") == "error":
                return f"{o.get('ename', 'Error')}: {o.get('evalue', '')}".strip()[:300]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"[:300]


def execute_notebook(nb, *, cwd: Path, timeout: int, env: dict | None = None, injected_at: int | None = None):
    """Run ``nb`` in place with a fresh python3 kernel; return a ``CellError`` or None.

    ``injected_at``: index of an injected parameters cell, so that error positions
    are given in the source notebook's own cell numbering.
    """
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        store_widget_state=True,
        record_timing=True,
        allow_errors=False,
        extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no transport warnings in the progress log
    )
    try:
        client.execute(env=env)
    except Exception as exc:  # noqa: BLE001 - any failure is reported, never raised
        index, first = _failed_cell(nb, exc)
        if index is not None and injected_at is not None and index > injected_at:
            index -= 1
        return CellError(cell=index, first_line=first, error=_error_text(nb, exc))
    return None


def notebook_sources(nb) -> list[str]:
    """Sources declared with ``declare_sources`` (output metadata), in order, unique."""
    seen: list[str] = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            for s in o.get("metadata", {}).get(SOURCES_METADATA_KEY, []) or []:
                if s not in seen:
                    seen.append(s)
    return seen


_REMOTE_SCRIPT = re.compile(r"""<script[^>]*\ssrc=["']?(?:https?:)?//[^>]*>\s*</script>""", re.I)


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
            html = data.get("text/html")
            if html is None:
                continue
            text = "".join(html) if isinstance(html, list) else html
            new, n = _REMOTE_SCRIPT.subn("", text)
            if n:
                data["text/html"] = new
                removed += n
    return removed


def _error_banner(nb, name: str, err: CellError) -> None:
    import html

    import nbformat

    text = (
        f'<div class="labkit-error" style="border:2px solid #b00020;padding:8px;color:#b00020">'
        f"<b>{html.escape(name)} did not finish</b>: {html.escape(err.describe())}. "
        "The page shows the outputs up to that cell.</div>"
    )
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(text))


def export_html(nb, path: Path) -> None:
    """Write ``nb`` as a standalone offline HTML page (atomically)."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="lab",
        extra_loaders=[DictLoader({_TEMPLATE_NAME: _TEMPLATE})],
        template_file=_TEMPLATE_NAME,
        require_js_url=REQUIRE_JS,
        widget_renderer_url=WIDGET_RENDERER,
        mathjax_url="",
    )
    strip_remote_scripts(nb)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
    write_atomic(path, body)


def vendor_static(out_dir: Path, node_modules: Path | None = None) -> bool:
    """Copy the widget renderer and require.js into ``<out>/_static``; False if missing.

    Without them plotly figures still render only if require.js is present, so a
    missing ``node_modules`` (run ``npm ci``) is reported as a warning.
    """
    node_modules = Path(node_modules) if node_modules is not None else REPO_ROOT / "node_modules"
    ok = True
    for src_rel, dst_rel in _VENDOR.items():
        src = node_modules / src_rel
        dst = out_dir / STATIC / dst_rel
        if not src.is_dir():
            ok = False
            continue
        dst.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.is_file() and not f.name.endswith(".map") and f.name not in ("embed.js", "libembed-amd.js"):
                if f.suffix in (".js", ".woff", ".woff2", ".ttf", ".eot", ".svg", ".txt") or f.name == "LICENSE":
                    shutil.copyfile(f, dst / f.name)
    if not ok:
        logger.warning("report assets missing under %s: run `npm ci` (widgets will not render)", node_modules)
    return ok


def _public_machine(device: str) -> dict:
    from labkit.device import describe_machine

    keys = ("slug", "device", "gpu_name", "gpu_memory_gib", "gpu_sm_count", "gpu_capability", "driver",
            "cuda", "torch", "triton", "python", "cpu_model", "cpu_cores", "os", "kernel_mode")
    desc = describe_machine(device)
    return {k: desc.get(k) for k in keys}


def _load_manifest(out_dir: Path) -> dict:
    try:
        return json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _run_from_json(d: dict) -> NotebookRun:
    err = d.get("error")
    return NotebookRun(
        name=d["name"], title=d.get("title", d["name"]), html=d.get("html"), ok=bool(d.get("ok")),
        seconds=float(d.get("seconds", 0.0)), sources=list(d.get("sources", [])),
        error=CellError(**err) if err else None, has_widgets=bool(d.get("has_widgets")),
    )


def build_report(
    out_dir: Path | str = "reports",
    *,
    size: str = "quick",
    device: str = "auto",
    only: list[str] | None = None,
    notebooks_dir: Path | str = NOTEBOOKS_DIR,
    timeout: int = 1800,
    log=None,
) -> list[NotebookRun]:
    """Execute and export the notebooks into ``out_dir``; return one ``NotebookRun`` each.

    ``log`` (default: print to stderr) gets one progress line per notebook.
    ``--only`` runs keep the other notebooks' earlier entries in the index.
    """
    from labkit.device import resolve_device

    if size not in SIZES:
        raise UsageError(f"unknown size {size!r}: use quick or full")
    resolved = resolve_device(device)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    notebooks_dir = Path(notebooks_dir).resolve()
    paths = find_notebooks(notebooks_dir, only)
    if not paths:
        raise UsageError(f"no notebooks matching {NOTEBOOK_GLOB} in {notebooks_dir}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vendor_static(out_dir)
    env = dict(os.environ, LABKIT_DEVICE=resolved)

    runs: list[NotebookRun] = []
    for i, path in enumerate(paths, 1):
        t0 = time.perf_counter()
        log(f"[{i}/{len(paths)}] {path.stem} ...")
        nb = read_notebook(path)
        title = notebook_title(nb, path.stem)
        at = inject_parameters(nb, {"device": resolved, "size": size})
        err = execute_notebook(nb, cwd=notebooks_dir, timeout=timeout, env=env, injected_at=at)
        seconds = time.perf_counter() - t0
        if err is not None:
            _error_banner(nb, path.stem, err)
        html_name = f"{path.stem}.html"
        export_html(nb, out_dir / html_name)
        run = NotebookRun(
            name=path.stem, title=title, html=html_name, ok=err is None, seconds=round(seconds, 1),
            sources=notebook_sources(nb), error=err, has_widgets="widgets" in nb.metadata,
        )
        runs.append(run)
        status = "ok" if run.ok else f"FAILED at {err.describe()}"
        log(f"[{i}/{len(paths)}] {path.stem}: {status} ({seconds:.1f} s)")

    previous = _load_manifest(out_dir).get("notebooks", []) if only else []
    names = {r.name for r in runs}
    kept = [_run_from_json(d) for d in previous if d.get("name") not in names and (out_dir / str(d.get("html"))).is_file()]
    all_runs = sorted(runs + kept, key=lambda r: r.name)
    meta = {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "labkit_commit": labkit_commit(),
        "size": size,
        "device": resolved,
        "machine": _public_machine(resolved),
        "notebooks": [asdict(r) for r in all_runs],
    }
    write_atomic(out_dir / MANIFEST, json.dumps(meta, indent=1) + "\n")
    write_atomic(out_dir / "index.html", render_index(meta))
    return runs


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="labkit report",
        description="Execute every lab notebook headless and export offline HTML pages plus index.html.",
    )
    p.add_argument("--size", default="quick", choices=SIZES, help="quick (default) or full sweeps")
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these notebooks (e.g. 00_environment or 00)")
    p.add_argument("--out", default="reports", help="output folder (default: reports)")
    p.add_argument("--notebooks", default=str(NOTEBOOKS_DIR), help="folder of NN_*.py notebooks")
    p.add_argument("--timeout", type=int, default=None,
                   help="seconds allowed per cell (default 300 in quick size, 1800 in full)")
    return p


def main(argv: list[str] | None = None) -> int:
    """``labkit report``: exit 0 when every notebook ran, 1 when any failed, 2 on bad input."""
    args = _parser().parse_args(argv)
    if args.timeout is None:
        args.timeout = 300 if args.size == "quick" else 1800
    if args.timeout < 1:
        raise UsageError("--timeout must be at least 1 second")
    t0 = time.perf_counter()
    runs = build_report(
        args.out, size=args.size, device=args.device, only=args.only,
        notebooks_dir=args.notebooks, timeout=args.timeout,
    )
    failed = [r for r in runs if not r.ok]
    print(f"report: {len(runs) - len(failed)}/{len(runs)} notebooks ok in {time.perf_counter() - t0:.0f} s "
          f"-> {Path(args.out) / 'index.html'}")
    for r in failed:
        print(f"report: FAILED {r.name}: {r.error.describe()}", file=sys.stderr)
    return 1 if failed else 0
