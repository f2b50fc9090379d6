"""The report's page budget: plotly.js and large figures shipped compressed, or plotly.js shared.

A page exported with plotly's ``notebook`` renderer carries the whole plotly.js bundle
(~4.8 MB) inline, and each figure as an inline script holding its data. ``shrink_page``
post-processes a finished page:

- ``plotly="inline"`` (the default; the page stays one offline file): the bundle is stored
  gzip-compressed as base64 (~2 MB) and decompressed in the browser with the standard
  ``DecompressionStream`` API. Until it has run, ``window.Plotly`` is a small stand-in whose
  calls (``Plotly.newPlot(...)``) wait for the real library and return its promise, so the
  figure scripts, which run first, still draw their figures.
- ``plotly="shared"``: the bundle is written once as ``plotly.min.js`` in a folder next to
  the pages and each page loads it with a relative ``<script src>`` (pages then only work
  next to that folder).

In both modes figure scripts over ``compress_over`` bytes are stored compressed the same
way and run once decompressed, and plotly's MathJax set-up lines (MathJax is never loaded;
the lab's figures use no formulas) are dropped. ``page_report`` says what a page weighs.
"""

from __future__ import annotations

import base64
import functools
import gzip
import logging
import re
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

PLOTLY_MODES = ("inline", "shared")
PAGE_BUDGET_BYTES = 6_000_000  #: most bytes one report page may weigh
REPORT_BUDGET_BYTES = 40_000_000  #: most bytes all pages of a report may weigh together
COMPRESS_OVER_BYTES = 64_000  #: inline figure scripts larger than this are stored compressed
SHARED_NAME = "plotly.min.js"

# plotly.js's bundle starts with its licence banner: "/**\n* plotly.js v4.1.1\n..."
_BUNDLE = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>\s*/\*\*\s*\*\s*plotly\.js v(?P<version>[0-9][^\s*]*))",
                     re.S)
_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.S | re.I)
# plotly's renderer adds this line before every figure; it configures a MathJax that is never loaded
_HUB_LINE = (r"if \(window\.MathJax && window\.MathJax\.Hub && window\.MathJax\.Hub\.Config\) "
             r"\{window\.MathJax\.Hub\.Config\(\{SVG: \{font: \"STIX-Web\"\}\}\);\}")
_MATHJAX_TAG = re.compile(r"<script[^>]*>\s*" + _HUB_LINE + r"\s*</script>")  # a script holding only that line
_MATHJAX_LINE = re.compile(_HUB_LINE)
_REMOTE_MATHJAX = re.compile(r"<script[^>]*\ssrc=[\"']?[^\"'>]*mathjax[^>]*>", re.I)

# Runs before anything else on the page (inserted at the bundle's place, which comes before
# every figure). ``labkitUnpack(b64)`` resolves to the decompressed text.
_LOADER = """<script>
(function () {
  function unpack(b64) {
    var bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text();
  }
  function run(src) {
    var s = document.createElement("script");
    s.text = src;
    document.head.appendChild(s);  // runs at once
    s.remove();
  }
  window.labkitUnpack = unpack;
  window.labkitRun = function (b64) {
    return unpack(b64).then(run).catch(function (e) { console.error("labkit: could not unpack a script", e); });
  };
})();
</script>
"""

# The stand-in Plotly: every method waits for the real library (``ready``) and returns its promise.
_STAND_IN = """<script>
(function () {
  var ready = window.labkitUnpack("%s").then(function (src) {
    var s = document.createElement("script");
    s.text = src;
    document.head.appendChild(s);
    s.remove();
    return window.Plotly;
  });
  window.labkitPlotlyReady = ready;
  window.Plotly = new Proxy({}, {
    get: function (_, key) {
      if (typeof key !== "string" || key === "then") return undefined;
      return function () {
        var args = arguments;
        return ready.then(function (P) { return P[key].apply(P, args); });
      };
    },
  });
})();
</script>"""


@dataclass(frozen=True)
class PageSize:
    """What a page weighs: ``total_bytes``, the inline plotly.js bundles, the largest figure script."""

    total_bytes: int
    plotly_bundles: int
    largest_script_bytes: int
    mathjax_refs: int


@functools.lru_cache(maxsize=4)  # the same plotly.js bundle on every page of a report
def _pack(text: str) -> str:
    """``text`` gzip-compressed (mtime 0: the same text always gives the same page) as base64."""
    return base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


def unpack(b64: str) -> str:
    """The inverse of the page's compression (what the browser's ``labkitUnpack`` does)."""
    return gzip.decompress(base64.b64decode(b64)).decode("utf-8")


def _find_bundles(page: str) -> list[tuple[int, int, int, str]]:
    """``(tag_start, body_start, tag_end, version)`` of each inline plotly.js bundle."""
    out = []
    for m in _BUNDLE.finditer(page):
        close = page.find("</script>", m.start("body"))
        if close < 0:
            continue
        out.append((m.start(), m.start("body"), close + len("</script>"), m.group("version")))
    return out


def page_report(page: str) -> PageSize:
    """Size facts of a finished page (bytes of its UTF-8 text)."""
    scripts = [len(m.group("body").encode("utf-8")) for m in _SCRIPT.finditer(page)
               if "plotly.js v" not in m.group("body")[:200]]
    return PageSize(total_bytes=len(page.encode("utf-8")), plotly_bundles=len(_find_bundles(page)),
                    largest_script_bytes=max(scripts, default=0), mathjax_refs=len(_REMOTE_MATHJAX.findall(page)))


def shrink_page(page: str, *, plotly: str = "inline", static_dir: Path | str | None = None,
                static_url: str = "_static", compress_over: int = COMPRESS_OVER_BYTES) -> str:
    """``page`` with its plotly.js bundle compressed (``inline``) or shared (``shared``).

    ``shared`` writes ``<static_dir>/plotly.min.js`` (the page links ``<static_url>/plotly.min.js``);
    ``static_dir`` is required then. A page without a bundle keeps its figures as they are
    (apart from compression of large figure scripts and the MathJax lines).
    """
    if plotly not in PLOTLY_MODES:
        raise ValueError(f"unknown plotly mode {plotly!r}: use one of {', '.join(PLOTLY_MODES)}")
    if plotly == "shared" and static_dir is None:
        raise ValueError("plotly='shared' needs static_dir, the folder plotly.min.js is written to")
    before = len(page)
    page = _MATHJAX_LINE.sub("", _MATHJAX_TAG.sub("", page))
    bundles = _find_bundles(page)
    if not bundles:
        return _compress_scripts(page, compress_over)
    parts, at = [], 0
    for i, (start, body, end, version) in enumerate(bundles):
        parts.append(page[at:start])
        source = page[body:end - len("</script>")]
        if i == 0:
            if plotly == "shared":
                from labkit.fileio import write_atomic

                static_dir = Path(static_dir)
                static_dir.mkdir(parents=True, exist_ok=True)
                write_atomic(static_dir / SHARED_NAME, source)
                parts.append(_LOADER + f'<script src="{static_url.rstrip("/")}/{SHARED_NAME}"></script>')
            else:
                parts.append(_LOADER + _STAND_IN % _pack(source))
        at = end  # a second copy of the bundle is dropped: the first one serves the page
    parts.append(page[at:])
    page = "".join(parts)
    page = _compress_scripts(page, compress_over)
    logger.info("page %d -> %d bytes (plotly.js v%s %s)", before, len(page), bundles[0][3], plotly)
    return page


def _compress_scripts(page: str, compress_over: int) -> str:
    """Large plain inline scripts (figures) after the loader stored compressed, run once unpacked."""
    at = page.find("window.labkitRun = ")
    if at < 0:
        return page
    at = page.find("</script>", at) + len("</script>")

    def repl(m: re.Match) -> str:
        body, attrs = m.group("body"), m.group("attrs")
        if len(body) <= compress_over or "src=" in attrs or ("type=" in attrs and "javascript" not in attrs):
            return m.group(0)
        if "labkitUnpack" in body or "labkitRun" in body:
            return m.group(0)
        return f'<script>window.labkitRun("{_pack(body)}");</script>'

    return page[:at] + _SCRIPT.sub(repl, page[at:])
