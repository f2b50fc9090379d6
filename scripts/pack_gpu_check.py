"""Pack what scripts/gpu_check.sh wrote into one tarball of at most --max-mb megabytes.

    python scripts/pack_gpu_check.py WORK OUT.tar.gz [--max-mb 16] [--progress]

WORK holds results/, logs/, traces/ (engine/<run>/*.pt.trace.json.gz, h2d/*), profile.json,
summary.txt and report/ (the report's pages). Always packed: results, logs, profile, summary.
The report's pages go in as report.tar.xz (one solid xz stream: the plotly.js every page
embeds compresses to one copy). A trace that cannot be read to its end (a step killed while
its profiler wrote it) is skipped. Traces go in whole while they fit; when they do not, the
largest are trimmed to their first profiled step (scripts/trim_trace.py), then h2d traces and
finally engine traces are left out, largest first. MANIFEST.txt in the tarball lists every
file with its size and what was skipped, trimmed or left out.

``--progress`` is the quick pack after each step: no pages, no trimming, fast compression.
The tarball replaces OUT in one rename, so OUT is always a whole tarball. Exit 0 when the
tarball fits, 1 when even the fixed parts exceed the cap (it is written anyway), 2 on bad input.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz")
FIXED = ("results", "logs", "profile.json", "summary.txt")
TRIM_ABOVE = 256 * 1024  # bytes: smaller traces are kept whole
HEADROOM = 64 * 1024  # bytes for tar headers and the manifest


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _traces(work: Path) -> list[Path]:
    """Trace files under WORK/traces, engine runs first (the notebooks read those)."""
    root = work / "traces"
    if not root.is_dir():
        return []
    files = [p for p in root.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES)]
    return sorted(files, key=lambda p: (0 if p.relative_to(root).parts[0] == "engine" else 1, str(p)))


CHECKED = ".traces_checked.json"  # in WORK: traces already read to their end, by path, size and mtime


def unreadable(path: Path) -> str | None:
    """Why the trace ``path`` cannot be read to its end (truncated gzip, cut-off JSON), or None."""
    try:
        tail = b""
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    tail = (tail + chunk)[-64:]
        else:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - 64))
                tail = f.read()
    except (OSError, EOFError, zlib.error) as exc:
        return f"{type(exc).__name__}: {exc}"
    if not tail.rstrip().endswith(b"}"):
        return "the JSON stops before its end"
    return None


def _read_checked(work: Path) -> set[str]:
    import json

    try:
        return set(json.loads((work / CHECKED).read_text()))
    except (OSError, ValueError):
        return set()


def _write_checked(work: Path, checked: set[str]) -> None:
    import json

    try:
        (work / CHECKED).write_text(json.dumps(sorted(checked)))
    except OSError:
        pass  # only a cache: the next pack reads the traces again


def _trim(src: Path, dst: Path):
    """``trim_trace.trim_trace(src, dst, steps=1)`` (scripts/trim_trace.py); an error (or no trimmer) is a note,
    not a stop."""
    try:
        from trim_trace import trim_trace  # beside this script

        return trim_trace(src, dst, steps=1), None
    except Exception as exc:  # noqa: BLE001 - packing goes on with the trace untrimmed
        return None, f"{type(exc).__name__}: {exc}"


def pack_report(report_dir: Path, dst: Path) -> None:
    """``report_dir`` as ``dst`` (tar.xz, preset 9 with its 64 MiB window)."""
    with tarfile.open(dst, "w:xz", preset=9) as tar:
        tar.add(report_dir, arcname="report")


def pack(work: Path, out: Path, max_bytes: int, *, progress: bool = False) -> tuple[bool, list[str]]:
    """Write the tarball; return (fits, manifest lines). ``progress``: no pages, no trimming, fast gzip."""
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "stage"
        stage.mkdir()
        for name in FIXED:
            src = work / name
            if src.is_dir():
                shutil.copytree(src, stage / name)
            elif src.is_file():
                shutil.copy2(src, stage / name)
        if (work / "report").is_dir() and not progress:
            pack_report(work / "report", stage / "report.tar.xz")
        used = _size(stage) + HEADROOM
        traces = []
        checked = _read_checked(work)
        for p in _traces(work):
            key = f"{p.relative_to(work)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
            why = None if key in checked else unreadable(p)
            if why:
                notes.append(f"skipped {p.relative_to(work)} ({p.stat().st_size} bytes): unreadable: {why}")
            else:
                checked.add(key)
                traces.append(p)
        _write_checked(work, checked)
        sizes = {p: p.stat().st_size for p in traces}
        # 1. trim the largest traces until the whole set fits (or all large ones are trimmed)
        trimmed: dict[Path, Path] = {}
        for p in sorted(traces, key=lambda q: -sizes[q]):
            if progress or used + sum(sizes.values()) <= max_bytes or sizes[p] <= TRIM_ABOVE:
                break
            dst = Path(tmp) / "trimmed" / p.relative_to(work)
            dst.parent.mkdir(parents=True, exist_ok=True)
            stats, err = _trim(p, dst)
            if err:
                notes.append(f"could not trim {p.relative_to(work)}: {err}")
            elif stats is not None and dst.stat().st_size < sizes[p]:
                trimmed[p] = dst
                notes.append(f"trimmed {p.relative_to(work)}: {sizes[p]} -> {dst.stat().st_size} bytes, "
                             f"first {stats.steps_kept} of {stats.steps_in} profiled steps")
                sizes[p] = dst.stat().st_size
        # 2. leave out h2d traces, then engine traces, largest first, until it fits
        dropped: set[Path] = set()
        for p in sorted(traces, key=lambda q: (0 if "engine" not in q.relative_to(work).parts else 1, -sizes[q])):
            if used + sum(s for q, s in sizes.items() if q not in dropped) <= max_bytes:
                break
            dropped.add(p)
            notes.append(f"left out {p.relative_to(work)} ({sizes[p]} bytes): over the {max_bytes} byte cap")
        for p in traces:
            if p in dropped:
                continue
            dst = stage / p.relative_to(work)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(trimmed.get(p, p), dst)
        # 3. the manifest, then the tarball
        lines = [f"{f.stat().st_size:>10}  {f.relative_to(stage)}" for f in sorted(stage.rglob("*")) if f.is_file()]
        total = sum(f.stat().st_size for f in stage.rglob("*") if f.is_file())
        manifest = [f"# gpu_check tarball: {len(lines)} files, {total} bytes before gzip, cap {max_bytes}"]
        manifest += lines + [f"# {n}" for n in notes]
        (stage / "MANIFEST.txt").write_text("\n".join(manifest) + "\n")
        tmp_out = out.with_name(f".{out.name}.{os.getpid()}.part")
        try:
            with tarfile.open(tmp_out, "w:gz", compresslevel=1 if progress else 9) as tar:
                for child in sorted(stage.iterdir()):
                    tar.add(child, arcname=child.name)
            tmp_out.replace(out)
        finally:
            tmp_out.unlink(missing_ok=True)
    size = out.stat().st_size
    fits = size <= max_bytes
    notes.append(f"{out.name}: {size} bytes ({size / 1e6:.1f} MB) {'within' if fits else 'OVER'} the cap of {max_bytes / 1e6:.0f} MB")
    return fits, notes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Pack a gpu_check work folder into one capped tarball.")
    p.add_argument("work", help="the folder gpu_check.sh filled")
    p.add_argument("out", help="the tarball to write (.tar.gz)")
    p.add_argument("--max-mb", type=float, default=16.0, help="size cap in MB (10^6 bytes; default 16)")
    p.add_argument("--progress", action="store_true", help="the quick pack after a step: no pages, no trimming")
    args = p.parse_args(argv)
    work, out = Path(args.work), Path(args.out)
    if not work.is_dir():
        print(f"pack_gpu_check: no such folder: {work}", file=sys.stderr)
        return 2
    if args.max_mb <= 0:
        print("pack_gpu_check: --max-mb must be positive", file=sys.stderr)
        return 2
    # a time limit's SIGTERM unwinds like an exception: the part file is removed, OUT stays whole
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    fits, notes = pack(work, out, int(args.max_mb * 1e6), progress=args.progress)
    for n in notes:
        print(f"pack: {n}")
    return 0 if fits else 1


if __name__ == "__main__":
    sys.exit(main())
