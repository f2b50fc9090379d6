"""The trace commands' output files (checked before any work, written all or none) and ``labkit whatif``'s page."""

from __future__ import annotations

import html
import json
import os
import tempfile
from pathlib import Path

import pandas as pd

from labkit import fileio
from labkit.errors import UsageError


def check_output(path: str | os.PathLike) -> Path:
    """A user-named output path that can be written: not a folder, in an existing folder."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"output {str(path)!r} is a folder")
    if not path.parent.is_dir():
        raise UsageError(f"output folder {str(path.parent)!r} does not exist")
    return path


def check_outputs(outputs: dict[str, str | None], inputs: list[Path]) -> dict[str, Path]:
    """Check every named output before any work: writable, pairwise distinct, not an input.

    ``outputs``: option name -> path (None when not given). Returns the given ones as Paths."""
    given = {k: check_output(v) for k, v in outputs.items() if v}
    seen: dict = {}
    for opt, p in given.items():
        key = p.resolve()
        if key in seen:
            raise UsageError(f"{seen[key]} and {opt} name the same file {str(p)!r}")
        seen[key] = opt
    ins = {p.resolve() for p in inputs}
    for opt, p in given.items():
        if p.resolve() in ins:
            raise UsageError(f"{opt} {str(p)!r} is one of the input traces")
    return given


def json_text(payload) -> str:
    """A command's JSON output as written: indented, no NaN, one trailing newline."""
    return json.dumps(payload, indent=1, allow_nan=False) + "\n"


def write_all(outputs: dict[Path, str]) -> None:
    """Write every output or none: all go to temporary files first, then each replaces its target."""
    temps: list[tuple[str, Path]] = []
    done: list[Path] = []
    try:
        for path, text in outputs.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            temps.append((tmp, path))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, fileio._default_mode())
        for tmp, path in temps:
            os.replace(tmp, path)
            done.append(path)
    except OSError as exc:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        for path in done:
            path.unlink(missing_ok=True)
        raise UsageError(f"cannot write outputs: {exc.strerror or exc}") from None


def finish(lines: list[str], texts: dict[Path, str]) -> int:
    """A command's end: print its summary ``lines``, write every output (``write_all``), say where; exit code 0."""
    for line in lines:
        print(line)
    write_all(texts)
    for path in texts:
        print(f"wrote {path}")
    return 0

CSS = """
body{font-family:system-ui,sans-serif;margin:20px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:right;max-width:520px;overflow-wrap:anywhere}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.badge{display:inline-block;padding:2px 8px;border-radius:4px;color:#fff;font-size:12px}
.sim{background:#b35900}.gpu{background:#1b7f3a}.host{background:#1f5f99}
.flag{color:#a00;font-weight:bold}.bar{display:inline-block;height:12px}
.m{background:#1f5f99}.p{background:#b35900}.ok{color:#1b7f3a}.bad{color:#a00;font-weight:bold}
"""


def html_table(df: pd.DataFrame, top: int | None = None, floatfmt: str = "{:.3f}") -> str:
    if top is not None:
        df = df.head(top)
    if len(df) == 0:
        return "<p><i>none</i></p>"
    cols = list(df.columns)
    head = "".join(f"<th class='l'>{html.escape(str(c))}</th>" for c in cols)
    body = []
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            if isinstance(v, float):
                cells.append(f"<td>{floatfmt.format(v)}</td>")
            elif isinstance(v, (int,)) or hasattr(v, "dtype"):
                cells.append(f"<td>{html.escape(str(v))}</td>")
            else:
                cells.append(f"<td class='l'>{html.escape(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


# -- labkit whatif's page ------------------------------------------------------------------------

def _num(x, nd: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def _row(cells, left: int = 1) -> str:
    cells = [f"<td class='l'>{html.escape(str(c))}</td>" if i < left else f"<td>{html.escape(str(c))}</td>"
             for i, c in enumerate(cells)]
    return "<tr>" + "".join(cells) + "</tr>"


def render_whatif(w) -> str:
    """The page for ``w`` (a ``labkit.trace.whatif.predict.WhatIf``) as a string."""
    j = w.to_json()
    s, m, p, rc, g = j["source"], j["measured"], j["predicted"], j["replay_check"], j["gaps"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>labkit whatif</title><style>{CSS}</style>"
             "</head><body>", "<h1>labkit whatif</h1>",
             f"<p>{html.escape(str(s['file']))} &middot; {html.escape(s['kind'])} &middot; GPU: "
             f"{html.escape(str(s.get('gpu') or 'none recorded'))} &middot; steps: {j['steps']['count']} x "
             f"{html.escape(j['steps']['what'])}</p>", "<h2>Changes</h2><ul>"]
    parts += ([f"<li>{html.escape(c['describe'])} ({c['matched']} matched)"
               + (f"<br><span class='bad'>{html.escape(c['warning'])}</span>" if c.get("warning") else "") + "</li>"
               for c in j["changes"]] or ["<li>none</li>"])
    parts.append("</ul><h2>Measured vs predicted</h2><table><tr><th class='l'></th><th>measured</th>"
                 "<th>predicted</th></tr>")
    parts.append(_row(["median step (ms)", _num(m["step_ms_median"]), _num(p["step_ms_median"])]))
    parts.append(_row(["tokens/s", _num(m["tokens_per_s"], 0), _num(p["tokens_per_s"], 0)]))
    parts.append(_row(["device idle fraction", _num(m["device_idle_frac"]), _num(p["device_idle_frac"])]))
    parts.append("</table>")
    top = max([x or 0 for x in m["step_ms"] + p["step_ms"]] or [1]) or 1
    parts.append("<h2>Steps (ms)</h2><table><tr><th>step</th><th>measured</th><th>predicted</th>"
                 "<th class='l'></th></tr>")
    for i, (a, b) in enumerate(zip(m["step_ms"], p["step_ms"])):
        bars = (f"<span class='bar m' style='width:{200 * a / top:.0f}px'></span><br>"
                f"<span class='bar p' style='width:{200 * b / top:.0f}px'></span>")
        parts.append(f"<tr><td>{i}</td><td>{_num(a)}</td><td>{_num(b)}</td><td class='l'>{bars}</td></tr>")
    parts.append("</table><h2>Streams</h2><table><tr><th>device</th><th>stream</th><th>busy ms</th>"
                 "<th>idle ms measured</th><th>idle ms predicted</th></tr>")
    for a, b in zip(m["streams"], p["streams"]):
        parts.append(_row([a["device"], a["stream"], _num(a["busy_ms"]), _num(a["idle_ms"]), _num(b["idle_ms"])], 0))
    parts.append(f"</table><h2>Gaps of {g['threshold_us']:g} us or more</h2><p>{g['measured_count']} measured, "
                 f"{g['closed_count']} close ({g['closed_us'] / 1e3:.3f} ms), {g['remaining_count']} remain "
                 f"({g['remaining_us'] / 1e3:.3f} ms)</p><table><tr><th class='l'>before op</th>"
                 "<th class='l'>launched in</th><th>measured us</th><th>predicted us</th></tr>")
    for r in g["largest_remaining"]:
        parts.append(_row([r["next_op"][:80], r["launched_in"], _num(r["measured_us"], 1),
                           _num(r["predicted_us"], 1)], 2))
    cls = "ok" if rc["ok"] else "bad"
    parts.append(f"</table><h2>Self-check</h2><p class='{cls}'>unchanged replay vs measured steps: "
                 f"{100 * rc['step_ms_error']:.2f}% (tolerance {100 * rc['tolerance']:.0f}%)</p>")
    parts += [f"<p>note: {html.escape(n)}</p>" for n in j["notes"]]
    sg = j.get("suggestions")
    if sg is not None:
        parts.append(f"<h2>Suggestions</h2><p>the unchanged replay: {_num(sg['base_step_ms'])} ms a step</p>")
        ranked = sg.get("ranked_by", "device idle")
        for key, title, what in (("reads", "placeholder reads (the #40143 pattern)", "read_us"),
                                 ("spans", f"host spans by the {ranked} they overlap", "idle_overlap_ms"),
                                 ("syncs", "synchronizing call sites by the time they waited", "waited_ms"),
                                 ("copies", "repeated small pageable copies (a step)", "per_step")):
            parts.append(f"<h3>{title}</h3><table><tr><th class='l'>argument</th><th>{what}</th>"
                         "<th>predicted step ms</th></tr>")
            parts += [_row([x["argument"], _num(x[what]) if what != "per_step" else x[what],
                            _num(x["predicted_step_ms"])]) for x in sg.get(key, [])] \
                or ["<tr><td class='l'>none</td></tr>"]
            parts.append("</table>")
    parts.append("</body></html>\n")
    return "".join(parts)
