"""The results store: one JSON file per benchmark at ``data/results/<machine>/<name>.json``.

More: docs/reference.md, ``labkit.results``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import os
import re
import shlex
import subprocess
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from labkit.device import SOURCES, describe_machine
from labkit.fileio import write_json
from labkit.timing import IN_RUN_KEY

logger = logging.getLogger(__name__)

SCHEMA = 1
#: run sizes: ``quick`` (seconds to minutes, the default everywhere) and ``full`` (the recordings)
SIZES = ("quick", "full")
#: the suffix of a quick run's result name
QUICK_SUFFIX = "_quick"
#: environment: the command line recorded in results made while it is set (``labkit`` sets it)
COMMAND_ENV = "LABKIT_COMMAND"
#: environment: the commit to record where the tree is a copy without ``.git``
COMMIT_ENV = "LABKIT_COMMIT"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

# -- result names: the command that writes each and the pages that read it import the same constant ----
CALIBRATION, ENGINE, ENGINE_SIM, ATTN_BENCH = "calibration", "engine", "engine_sim", "attn_bench"
H2D_STEP, H2D_SWEEP, H2D_GPU_IDLE, RANGES_STEP, RANGES_SWEEP = (
    "h2d_step", "h2d_sweep", "h2d_gpu_idle", "ranges_step", "ranges_sweep")
MM_GET_NUM_EMBEDS, MM_DECODE_STEP, MM_SWEEP, MM_WORKLOAD = (
    "mm_get_num_embeds", "mm_decode_step", "mm_sweep", "mm_workload")
TRACE_BENCH, PR_TABLE, REPORT = "trace_bench", "pr_table", "report"
VLLM_AB, VLLM_INPUT, VLLM_STEP, VLLM_SCHED, VLLM_PREFIX_RANGES, VLLM_OWN_TESTS, VLLM_SERVE_TIMELINE = (
    "vllm_ab", "vllm_input", "vllm_step", "vllm_sched", "vllm_prefix_ranges", "vllm_own_tests", "vllm_serve_timeline")
VLLM_OVERLAP = "vllm_overlap"
#: every result name -> the command that writes it
NAMES = {
    CALIBRATION: "labkit calibrate", ENGINE: "labkit bench engine", ENGINE_SIM: "notebook 02 (its simulated runs)",
    ATTN_BENCH: "labkit bench attn", H2D_STEP: "labkit bench h2d", H2D_SWEEP: "labkit bench h2d",
    H2D_GPU_IDLE: "labkit bench h2d", RANGES_STEP: "labkit bench ranges", RANGES_SWEEP: "labkit bench ranges",
    MM_GET_NUM_EMBEDS: "labkit bench mm", MM_DECODE_STEP: "labkit bench mm", MM_SWEEP: "labkit bench mm --sweep",
    MM_WORKLOAD: "labkit bench mm --workload", TRACE_BENCH: "labkit bench trace", PR_TABLE: "labkit bench serve-sim",
    REPORT: "labkit report", VLLM_AB: "labkit vllm ab", VLLM_INPUT: "labkit bench vllm-input",
    VLLM_STEP: "labkit bench vllm-step", VLLM_SCHED: "labkit bench vllm-sched",
    VLLM_PREFIX_RANGES: "labkit bench vllm-prefix-ranges", VLLM_OWN_TESTS: "python -m scripts.vllm_own.run",
    VLLM_SERVE_TIMELINE: "scripts/vllm_ab.sh --timeline", VLLM_OVERLAP: "labkit bench vllm-overlap",
}
REPO_ROOT = Path(__file__).resolve().parent.parent


def data_root() -> Path:
    """``$LABKIT_DATA`` or the repository's ``data/`` folder."""
    env = os.environ.get("LABKIT_DATA")
    return Path(env) if env else REPO_ROOT / "data"


def results_root() -> Path:
    """``$LABKIT_RESULTS`` or ``<data_root>/results``."""
    env = os.environ.get("LABKIT_RESULTS")
    return Path(env) if env else data_root() / "results"


# -- provenance ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """Short git commit of this checkout (``+dirty`` if ``labkit/`` has uncommitted changes), or None.

    None where ``git`` is missing or the tree is not its own repository (a copy without
    ``.git``, even one lying inside some other repository).
    """
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10,
                              check=False)

    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != REPO_ROOT:
            return None
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0 or not head.stdout.strip():
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "labkit")
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def labkit_commit() -> str:
    """The labkit commit to record: from git, else ``$LABKIT_COMMIT`` (a copy without ``.git``), else ``unknown``."""
    return git_commit() or os.environ.get(COMMIT_ENV, "").strip() or "unknown"


def commit_status(commit: str | None) -> str:
    """``clean``, ``dirty`` (uncommitted changes) or ``unknown`` for a recorded commit string."""
    commit = (commit or "").strip()
    if not commit or commit == "unknown":
        return "unknown"
    return "dirty" if commit.endswith("+dirty") else "clean"


def current_command() -> str | None:
    """The command line recorded in new results: ``$LABKIT_COMMAND`` (set by the ``labkit`` command
    for itself and everything it starts, e.g. the notebooks of ``labkit report``), else None
    (labkit called from Python)."""
    return os.environ.get(COMMAND_ENV) or None


def format_command(argv: Iterable[str]) -> str:
    """A command line as one shell-quoted string, the home folder written ``~`` (no user names)."""
    text = shlex.join([str(a) for a in argv])
    home = os.path.expanduser("~")
    if home and home not in ("/", "~"):
        text = text.replace(home, "~")
    return text


# -- results ---------------------------------------------------------------------------------

@dataclass
class BenchResult:
    """One benchmark's result; ``rows`` are flat dicts (variant, swept params, quantiles)."""

    name: str
    source: str
    params: dict
    rows: list[dict]
    machine: dict = field(default_factory=dict)
    labkit_commit: str = "unknown"
    size: str = "unknown"
    command: str | None = None
    created: str = ""
    schema: int = SCHEMA
    complete: bool = True
    path: str | None = field(default=None, compare=False)

    @property
    def slug(self) -> str:
        return self.machine.get("slug", "unknown")

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("path", None)
        return d


# -- the unit costs of a result's own run -----------------------------------------------------------

_KEEP_UNIT_COSTS = False


def keep_unit_costs(on: bool = True) -> None:
    """From now on (until ``on`` is False) every result this process makes keeps the unit costs of its
    run, measured once at the first result: every bench verb, ``labkit calibrate`` and the notebooks."""
    global _KEEP_UNIT_COSTS
    _KEEP_UNIT_COSTS = on


@functools.lru_cache(maxsize=1)
def _this_runs_unit_costs() -> list[dict]:
    from labkit.timing import in_run_calibration  # torch: only where a run keeps its unit costs

    return in_run_calibration()


def make_result(name: str, rows: Iterable[dict], *, params: dict | None = None, source: str,
                machine: dict | None = None, size: str | None = None, command: str | None = None) -> BenchResult:
    """Build a result stamped with this machine, commit, command line and time.

    ``size`` (``quick`` or ``full``) must agree with the name: quick results are named
    ``<name>_quick`` (:func:`sized_name`). Left out, it follows from the name.
    ``command`` defaults to :func:`current_command`.
    """
    if not _NAME.match(name):
        raise ValueError(f"bad result name {name!r}: letters, digits, '.', '_' and '-' only")
    if source not in SOURCES:
        raise ValueError(f"bad source {source!r}: one of {', '.join(SOURCES)}")
    named = "quick" if name.endswith(QUICK_SUFFIX) else "full"
    if size is None:
        size = named
    if size not in SIZES:
        raise ValueError(f"bad size {size!r}: one of {', '.join(SIZES)}")
    if size != named:
        raise ValueError(f"result {name!r} is a {size} run: name it {sized_name(name, size)!r}")
    params = dict(params or {})
    if _KEEP_UNIT_COSTS and base_name(name) != CALIBRATION and IN_RUN_KEY not in params:
        params[IN_RUN_KEY] = _this_runs_unit_costs()
    return BenchResult(name=name, source=source, params=params, rows=[dict(r) for r in rows],
                       machine=dict(machine if machine is not None else describe_machine()),
                       labkit_commit=labkit_commit(), size=size,
                       command=command if command is not None else current_command(),
                       created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def base_name(name: str) -> str:
    """``name`` without its ``_quick`` suffix."""
    return name[: -len(QUICK_SUFFIX)] if name.endswith(QUICK_SUFFIX) else name


def sized_name(name: str, size: str) -> str:
    """Result name for a run of ``size``: ``name`` when full, ``name_quick`` otherwise (never doubled).

    Quick runs (the notebooks' default) never overwrite a full recording; ``*_quick.json``
    files are not committed.
    """
    base = base_name(name)
    return base if size == "full" else base + QUICK_SUFFIX


def save_result(result: BenchResult, root: Path | str | None = None) -> Path:
    """Write ``result`` atomically to ``<root>/<slug>/<name>.json`` and return the path."""
    root = Path(root) if root is not None else results_root()
    path = root / result.slug / f"{result.name}.json"
    write_json(path, result.to_json())
    result.path = str(path)
    logger.info("saved %s", path)
    return path


class PartialResult:
    """A running benchmark's result, rewritten atomically after each part with the rows so far.

    ``update(rows)`` writes result ``name`` (rows so far, ``complete: false``) to the results store
    unless ``save`` is False; the finished run's own ``save_result`` then replaces it with the
    whole result. ``name``, ``params``, ``source`` and ``size`` are as for :func:`make_result`.
    """

    def __init__(self, name: str, *, params: dict | None = None, source: str, size: str | None = None,
                 machine: dict | None = None, save: bool = True, root: Path | str | None = None) -> None:
        self.name, self.params, self.source, self.size = name, dict(params or {}), source, size
        self.machine = dict(machine if machine is not None else describe_machine())
        self.save, self.root = save, root
        self.rows: list[dict] = []
        self.path: Path | None = None
        make_result(name, [], params=self.params, source=source, size=size, machine=self.machine)  # checks

    def update(self, rows: Iterable[dict]) -> Path | None:
        """Record ``rows`` (every row so far) as the partial result; returns the file written, if any."""
        self.rows = [dict(r) for r in rows]
        if not self.save:
            return None
        res = make_result(self.name, self.rows, params=self.params, source=self.source, size=self.size,
                          machine=self.machine)
        res.complete = False
        self.path = save_result(res, self.root)
        return self.path

    def add(self, row: dict) -> Path | None:
        """Append one finished row and rewrite the partial result."""
        return self.update([*self.rows, row])


_REQUIRED = {"schema": int, "name": str, "source": str, "params": dict, "rows": list, "machine": dict}


def parse_result(data: object, path: str | None = None) -> BenchResult:
    """Validate a decoded JSON object as a result; ``ValueError`` says what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for key, typ in _REQUIRED.items():
        if not isinstance(data.get(key), typ):
            raise ValueError(f"missing or mistyped field {key!r}")
    if data["schema"] > SCHEMA:
        raise ValueError(f"schema {data['schema']} is newer than this labkit ({SCHEMA})")
    if data["source"] not in SOURCES:
        raise ValueError(f"unknown source {data['source']!r}")
    if not all(isinstance(r, dict) for r in data["rows"]):
        raise ValueError("rows must be objects")
    command = data.get("command")
    complete = data.get("complete", True)
    if not isinstance(complete, bool):
        raise ValueError("field 'complete' must be true or false")
    return BenchResult(
        name=data["name"], source=data["source"], params=data["params"], rows=data["rows"],
        machine=data["machine"], labkit_commit=str(data.get("labkit_commit") or "unknown"),
        size=_recorded_size(data), command=command if isinstance(command, str) else None,
        created=str(data.get("created", "")), schema=data["schema"], complete=complete, path=path,
    )


def _recorded_size(data: dict) -> str:
    """The size of a recorded result; files older than the top-level field say it in their params
    (``size``, ``quick`` or ``full``) or not at all (``unknown``)."""
    if data.get("size") in SIZES:
        return data["size"]
    params = data["params"]
    if params.get("size") in SIZES:
        return params["size"]
    if isinstance(params.get("quick"), bool):
        return "quick" if params["quick"] else "full"
    if isinstance(params.get("full"), bool):
        return "full" if params["full"] else "quick"
    return "unknown"


def provenance(result: BenchResult) -> str:
    """One line saying where ``result`` comes from, flagging what cannot be traced to a clean commit.

    E.g. ``h200 calibration: measured-gpu, size full, commit 3447216abcde, 2026-11-30``; an unknown
    commit reads ``commit UNKNOWN (not traceable to a labkit version)``, a dirty one
    ``commit 3447216abcde+dirty (UNCOMMITTED CHANGES)``, a size not recorded ``size UNKNOWN``, and a
    run that did not finish ends with ``PARTIAL: N rows of a run that did not finish``.
    """
    commit = {"unknown": "commit UNKNOWN (not traceable to a labkit version)",
              "dirty": f"commit {result.labkit_commit} (UNCOMMITTED CHANGES)"}.get(
        commit_status(result.labkit_commit), f"commit {result.labkit_commit}")
    size = result.size if result.size in SIZES else "UNKNOWN"
    date = result.created[:10] if result.created else "date unknown"
    partial = "" if result.complete else f", PARTIAL: {len(result.rows)} rows of a run that did not finish"
    return f"{result.slug} {result.name}: {result.source}, size {size}, {commit}, {date}{partial}"


def load_results(root: Path | str | None = None, *, machine: str | None = None,
                 names: Iterable[str] | None = None) -> list[BenchResult]:
    """Every readable result under ``root`` (only ``machine``'s folder, only the files ``names``, where
    given). Files that are not valid results are skipped with a warning naming the file. To find one
    result by name, :func:`find` or :func:`find_all`."""
    root = Path(root) if root is not None else results_root()
    if not root.is_dir():
        return []
    names = set(names) if names is not None else None
    out = []
    for path in sorted(root.glob("*/*.json")):
        if (machine is not None and path.parent.name != machine) or (names is not None and path.stem not in names):
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            out.append(parse_result(data, str(path)))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
            msg = f"skipping {path}: {exc}"
            warnings.warn(msg, stacklevel=2)
            logger.warning(msg)
    return out


# -- results by name: one per machine, its full run over its quick one, this machine's first ----------

def find_all(name: str, *, source: str | None = None, machine: str | None = None, size: str | None = None,
             results: Iterable[BenchResult] | None = None, root: Path | str | None = None,
             here_first: bool = True) -> list[BenchResult]:
    """Result ``name`` (its base name; one of :data:`NAMES`), one per machine, this machine's first
    (unless not ``here_first``), then by slug: a machine's full run, else its quick one, the newest
    where it holds several. Only ``source``, ``machine`` and ``size`` where given. Searches
    ``results``, else the store at ``root``."""
    name = base_name(name)
    if results is None:
        results = load_results(root, machine=machine, names=(name, name + QUICK_SUFFIX))
    best: dict[str, BenchResult] = {}
    for r in results:
        full = not r.name.endswith(QUICK_SUFFIX)
        if (base_name(r.name) != name or source not in (None, r.source) or machine not in (None, r.slug)
                or size not in (None, "full" if full else "quick")):
            continue
        kept = best.get(r.slug)
        if kept is None or (full, r.created) > (not kept.name.endswith(QUICK_SUFFIX), kept.created):
            best[r.slug] = r
    if len(best) < 2 or not here_first:
        return sorted(best.values(), key=lambda r: r.slug)
    here = describe_machine("cpu")["slug"]
    return sorted(best.values(), key=lambda r: (r.slug != here, r.slug))


def find(name: str, *, source: str | None = None, machine: str | None = None, where=None,
         size: str | None = None, results: Iterable[BenchResult] | None = None,
         root: Path | str | None = None) -> BenchResult | None:
    """The result ``name`` to show (:func:`find_all`'s order), with rows, and rows that satisfy
    ``where(rows)`` when given: of ``source`` and ``machine`` where one is, else of ``source``, else of
    ``machine``, else any. None when there is none."""
    found = [r for r in find_all(name, size=size, results=results, root=root)
             if r.rows and (where is None or where(r.rows))]
    for want_source, want_machine in ((source, machine), (source, None), (None, machine), (None, None)):
        hit = next((r for r in found if want_source in (None, r.source) and want_machine in (None, r.slug)), None)
        if hit is not None:
            return hit
    return None


#: environment: the results folder of the run a report belongs to (``scripts/gpu_check.sh`` sets it)
REUSE_ENV = "LABKIT_REUSE_RESULTS"


def this_run_results(names: Iterable[str], machine: str | None = None) -> tuple[dict[str, BenchResult] | None, str]:
    """The results ``names`` (base names) that the current run already measured, or ``(None, "")``.

    A report built right after the benchmarks (``scripts/gpu_check.sh``) points ``$LABKIT_REUSE_RESULTS``
    at that run's results folder; a notebook then reads them instead of measuring again, and the
    returned note (one line per result, for the page) says so. Only when every one of ``names`` is
    there, complete, for this machine (either size): otherwise the page measures as usual.
    """
    root = os.environ.get(REUSE_ENV)
    if not root:
        return None, ""
    slug = machine or describe_machine()["slug"]
    found: dict[str, BenchResult] = {}
    for name in names:
        hits = [r for r in find_all(name, machine=slug, root=root) if r.complete]
        if not hits:
            logger.info("%s: no complete %s in %s, measuring", REUSE_ENV, name, root)
            return None, ""
        found[base_name(name)] = hits[0]
    by_command: dict[str, list[BenchResult]] = {}
    for r in found.values():
        by_command.setdefault(r.command or "labkit, from Python", []).append(r)
    note = "\n".join(
        f"Not measured again on this page: read {', '.join(f'{r.name} ({r.source})' for r in group)} made "
        f"earlier in the same run by `{command}` ({provenance(group[0]).split(': ', 1)[1].split(', ', 1)[1]})."
        for command, group in by_command.items())
    return found, note


def reuse_or_measure(names: Iterable[str], measure) -> tuple[dict[str, BenchResult], str]:
    """This run's results ``names`` and the page's note (:func:`this_run_results`), else ``measure()``
    (a dict, base name -> result) and an empty note."""
    found, note = this_run_results(names)
    return (found, note) if found is not None else (measure(), "")


def results_rows(results: Iterable[BenchResult], params: Iterable[str] = ()) -> list[dict]:
    """Flat rows over many results, each tagged with machine slug, GPU, source and name, and the
    result's ``params`` named."""
    params = tuple(params)
    return [{"machine": r.slug, "gpu_name": r.machine.get("gpu_name"), "source": r.source, "result": r.name,
             "created": r.created, **{k: r.params.get(k) for k in params}, **row}
            for r in results for row in r.rows]


def results_table(results: Iterable[BenchResult]):
    """``results_rows`` as a pandas DataFrame (pandas is needed only here)."""
    import pandas as pd

    return pd.DataFrame(results_rows(results))
