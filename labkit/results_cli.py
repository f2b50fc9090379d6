"""``labkit results [--machine SLUG] [NAME] [--readme FILE [--check]]``: what the results store holds.

Without a name: one line per recorded result (machine, name, size, source, commit, date), a
commit that cannot be traced to a clean labkit version marked as such. With a name: that
result's provenance and its rows as a table (every machine that recorded it, or ``--machine``).
``--readme FILE``: rewrite FILE's findings block from the results (:mod:`labkit.report.findings`).
"""

from __future__ import annotations

import argparse
import sys
import warnings

from labkit.bench import format_table
from labkit.errors import UsageError
from labkit.results import QUICK_SUFFIX, BenchResult, commit_status, find_all, load_results, provenance, results_root

#: columns of the overview table
OVERVIEW_COLUMNS = ("machine", "name", "size", "source", "commit", "date")


def overview_rows(results: list[BenchResult]) -> list[dict]:
    """One row per result: the overview table's columns (``commit`` flagged when unknown or dirty)."""
    rows = []
    for r in results:
        status = commit_status(r.labkit_commit)
        commit = {"clean": r.labkit_commit, "dirty": f"{r.labkit_commit} (uncommitted changes)"}.get(status, "UNKNOWN")
        rows.append({"machine": r.slug, "name": r.name, "size": r.size, "source": r.source, "commit": commit,
                     "date": r.created[:10] if r.created else "-"})
    return rows


def _load(name: str | None, machine: str | None) -> list[BenchResult]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = (load_results(machine=machine) if name is None else
                 find_all(name, machine=machine, size="quick" if name.endswith(QUICK_SUFFIX) else None))
    for w in caught:
        print(f"labkit results: {w.message}", file=sys.stderr)
    return found


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", default=None, help="a result name (e.g. calibration): show its rows")
    p.add_argument("--machine", metavar="SLUG", default=None, help="only this machine's folder (e.g. h200)")
    p.add_argument("--readme", metavar="FILE", help="rewrite the findings block of FILE (README.md) from the results")
    p.add_argument("--check", action="store_true", help="with --readme: exit 1 when the block is out of date")


def main(args: argparse.Namespace) -> int:
    """``labkit results``."""
    root = results_root()
    if args.check and not args.readme:
        raise UsageError("--check needs --readme FILE")
    if args.readme:
        from labkit.report.findings import rewrite_readme

        changed = rewrite_readme(args.readme, check=args.check)
        print(f"{args.readme}: findings block {('out of date' if args.check else 'rewritten') if changed else 'up to date'}")
        return 1 if changed and args.check else 0
    if args.machine is not None and not (root / args.machine).is_dir():
        known = sorted(d.name for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
        raise UsageError(f"no machine {args.machine!r} in {root} (recorded: {', '.join(known) or 'none'})")
    found = _load(args.name, args.machine)
    if args.name is None:
        if not found:
            print(f"no results recorded under {root}")
            return 0
        print(format_table(overview_rows(found), columns=OVERVIEW_COLUMNS))
        return 0
    if not found:
        where = f" for machine {args.machine!r}" if args.machine else ""
        raise UsageError(f"no result named {args.name!r}{where} under {root} (labkit results lists them)")
    for i, res in enumerate(found):
        if i:
            print()
        print(provenance(res))
        if res.command:
            print(f"command: {res.command}")
        print(format_table(res.rows))
    return 0

