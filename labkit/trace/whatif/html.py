"""A small offline HTML page for a ``labkit whatif`` answer (plain HTML and CSS, no scripts)."""

from __future__ import annotations

import html

_CSS = """
body{font-family:system-ui,sans-serif;margin:20px;color:#222}h1{font-size:20px}
h2{font-size:16px;margin-top:24px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}.bar{display:inline-block;height:12px}
.m{background:#1f5f99}.p{background:#b35900}.ok{color:#1b7f3a}.bad{color:#a00;font-weight:bold}
"""


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
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>labkit whatif</title><style>{_CSS}</style>"
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
