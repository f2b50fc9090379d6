"""What a page carries itself and what a report shares: plotly.js and the page style once per report.

More: docs/reference.md, ``labkit.report.pagesize``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
from pathlib import Path

COMPRESS_OVER_BYTES = 64_000  #: inline figure scripts larger than this are stored compressed
SHARE_STYLE_OVER_BYTES = 8_000  #: inline styles larger than this go to the shared folder
SHARED_PLOTLY = "plotly.min.js"

# plotly.js's bundle starts with its licence banner: "/**\n* plotly.js v4.1.1\n..."
_BUNDLE = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>\s*/\*\*\s*\*\s*plotly\.js v(?P<version>[0-9][^\s*]*))",
                     re.S)
_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.S | re.I)
_STYLE = re.compile(r"<style[^>]*>(?P<body>.*?)</style>", re.S | re.I)
# plotly's renderer adds this line before every figure; it configures a MathJax that is never loaded
_HUB_LINE = (r"if \(window\.MathJax && window\.MathJax\.Hub && window\.MathJax\.Hub\.Config\) "
             r"\{window\.MathJax\.Hub\.Config\(\{SVG: \{font: \"STIX-Web\"\}\}\);\}")
_MATHJAX_TAG = re.compile(r"<script[^>]*>\s*" + _HUB_LINE + r"\s*</script>")  # a script holding only that line
_MATHJAX_LINE = re.compile(_HUB_LINE)

# Inserted before plotly.js: ``labkitRun(b64)`` unpacks a compressed script and runs it.
_LOADER = """<script>
window.labkitRun = function (b64) {
  var bin = atob(b64), bytes = new Uint8Array(bin.length);
  for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).text().then(function (src) {
    var s = document.createElement("script");
    s.text = src;
    document.head.appendChild(s);  // runs at once
    s.remove();
  }).catch(function (e) { console.error("labkit: could not unpack a script", e); });
};
</script>
"""


def pack(text: str) -> str:
    """``text`` gzip-compressed (mtime 0: the same text always gives the same page) as base64."""
    return base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


def unpack(b64: str) -> str:
    """The inverse of :func:`pack` (what the browser's ``labkitRun`` does before running the script)."""
    return gzip.decompress(base64.b64decode(b64)).decode("utf-8")


def _write_once(path: Path, text: str) -> None:
    """Write ``text`` at ``path`` unless the file already holds it (every page of a report shares it)."""
    from labkit.fileio import write_atomic

    if path.is_file() and path.stat().st_size == len(text.encode("utf-8")) and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


def _bundles(page: str) -> list[tuple[int, int, int]]:
    """``(tag_start, body_start, tag_end)`` of each inline plotly.js bundle."""
    out = []
    for m in _BUNDLE.finditer(page):
        close = page.find("</script>", m.start("body"))
        if close >= 0:
            out.append((m.start(), m.start("body"), close + len("</script>")))
    return out


def shrink_page(page: str, *, static_dir: Path | str | None = None, static_url: str = "_static",
                compress_over: int = COMPRESS_OVER_BYTES) -> str:
    """``page`` with plotly.js and large styles shared in ``static_dir`` (linked as ``static_url``),
    or kept inline once without one; large figure scripts compressed, MathJax lines dropped."""
    base = static_url.rstrip("/")
    page = _MATHJAX_LINE.sub("", _MATHJAX_TAG.sub("", page))
    if static_dir is not None:
        def share_style(m: re.Match) -> str:
            css = m.group("body")
            if len(css) <= SHARE_STYLE_OVER_BYTES:
                return m.group(0)
            name = f"style-{hashlib.sha256(css.encode('utf-8')).hexdigest()[:12]}.css"
            _write_once(Path(static_dir) / name, css)
            return f'<link rel="stylesheet" href="{base}/{name}">'

        page = _STYLE.sub(share_style, page)
    bundles = _bundles(page)
    if not bundles:
        return page
    start, body, end = bundles[0]
    if static_dir is not None:
        _write_once(Path(static_dir) / SHARED_PLOTLY, page[body:end - len("</script>")])
        plotly = f'<script src="{base}/{SHARED_PLOTLY}"></script>'
    else:
        plotly = page[start:end]
    tail, at = [], end
    for later_start, _, later_end in bundles[1:]:  # a second copy is dropped: the first one serves the page
        tail.append(page[at:later_start])
        at = later_end
    tail.append(page[at:])
    return page[:start] + _LOADER + plotly + _compress_scripts("".join(tail), compress_over)


def _compress_scripts(html: str, compress_over: int) -> str:
    """Large plain inline scripts (figures) stored compressed, run once unpacked."""
    def repl(m: re.Match) -> str:
        body, attrs = m.group("body"), m.group("attrs")
        if (len(body) <= compress_over or "src=" in attrs or ("type=" in attrs and "javascript" not in attrs)
                or "labkitRun" in body):
            return m.group(0)
        return f'<script>window.labkitRun("{pack(body)}");</script>'

    return _SCRIPT.sub(repl, html)
