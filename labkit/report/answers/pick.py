"""Picking the recorded result a page's answer reads: by name, a full run before a quick one, the
preferred machine or source first."""

from __future__ import annotations

from labkit.results import QUICK_SUFFIX, base_name, load_results


def recorded(results=None) -> list:
    """``results`` as given, or every result in the store."""
    return list(results) if results is not None else load_results()


def of_name(results, name: str) -> list:
    """The results named ``name`` (or ``name_quick``), one per machine: its full run where it has one."""
    best: dict[str, object] = {}
    for r in results:
        if base_name(r.name) != name:
            continue
        if r.slug not in best or best[r.slug].name.endswith(QUICK_SUFFIX):
            best[r.slug] = r
    return [best[k] for k in sorted(best)]


def pick(results, name: str, *, source: str | None = None, machine: str | None = None, where=None):
    """One ``name`` result: of ``source`` / ``machine`` where one matches (else any), whose rows
    satisfy ``where(rows)`` when given; None when there is none."""
    found = [r for r in of_name(results, name) if r.rows and (where is None or where(r.rows))]
    for want in ((source, machine), (source, None), (None, machine), (None, None)):
        hits = [r for r in found if want[0] in (None, r.source) and want[1] in (None, r.slug)]
        if hits:
            return hits[0]
    return None


def row(rows, **match) -> dict | None:
    """The first row whose columns equal ``match``."""
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)
