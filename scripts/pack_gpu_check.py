"""Pack what scripts/gpu_check.sh wrote into one tarball of at most --max-mb megabytes.

    python scripts/pack_gpu_check.py WORK OUT.tar.gz [--max-mb 16]

WORK holds results/, logs/, traces/ (engine/<run>/*.pt.trace.json.gz, h2d/*), profile.json,
summary.txt and report/ (the report's pages). Always packed: results, logs, profile, summary.
The report's pages go in as report.tar.xz (one solid xz stream: the plotly.js every page
embeds compresses to one copy). Traces go in whole while they fit; when they do not, the
largest are trimmed to their first profiled step (labkit.trace.read.trim), then h2d traces and
finally engine traces are left out, largest first. MANIFEST.txt in the tarball lists every
file with its size and what was trimmed or left out. Exit 0 when the tarball fits, 1 when even
the fixed parts exceed the cap (it is written anyway), 2 on bad input.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from labkit.trace.read.trim import trim_trace

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


def pack_report(report_dir: Path, dst: Path) -> None:
    """``report_dir`` as ``dst`` (tar.xz, preset 9 with its 64 MiB window)."""
    with tarfile.open(dst, "w:xz", preset=9) as tar:
        tar.add(report_dir, arcname="report")


def pack(work: Path, out: Path, max_bytes: int) -> tuple[bool, list[str]]:
    """Write the tarball; return (fits, manifest lines)."""
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
        if (work / "report").is_dir():
            pack_report(work / "report", stage / "report.tar.xz")
        used = _size(stage) + HEADROOM
        traces = _traces(work)
        sizes = {p: p.stat().st_size for p in traces}
        # 1. trim the largest traces until the whole set fits (or all large ones are trimmed)
        trimmed: dict[Path, Path] = {}
        for p in sorted(traces, key=lambda q: -sizes[q]):
            if used + sum(sizes.values()) <= max_bytes or sizes[p] <= TRIM_ABOVE:
                break
            dst = Path(tmp) / "trimmed" / p.relative_to(work)
            dst.parent.mkdir(parents=True, exist_ok=True)
            stats = trim_trace(p, dst, steps=1)
            if stats is not None and dst.stat().st_size < sizes[p]:
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
        tmp_out = out.with_name(out.name + ".part")
        with tarfile.open(tmp_out, "w:gz") as tar:
            for child in sorted(stage.iterdir()):
                tar.add(child, arcname=child.name)
        tmp_out.replace(out)
    size = out.stat().st_size
    fits = size <= max_bytes
    notes.append(f"{out.name}: {size} bytes ({size / 1e6:.1f} MB) {'within' if fits else 'OVER'} the cap of {max_bytes / 1e6:.0f} MB")
    return fits, notes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Pack a gpu_check work folder into one capped tarball.")
    p.add_argument("work", help="the folder gpu_check.sh filled")
    p.add_argument("out", help="the tarball to write (.tar.gz)")
    p.add_argument("--max-mb", type=float, default=16.0, help="size cap in MB (10^6 bytes; default 16)")
    args = p.parse_args(argv)
    work, out = Path(args.work), Path(args.out)
    if not work.is_dir():
        print(f"pack_gpu_check: no such folder: {work}", file=sys.stderr)
        return 2
    if args.max_mb <= 0:
        print("pack_gpu_check: --max-mb must be positive", file=sys.stderr)
        return 2
    fits, notes = pack(work, out, int(args.max_mb * 1e6))
    for n in notes:
        print(f"pack: {n}")
    return 0 if fits else 1


if __name__ == "__main__":
    sys.exit(main())
