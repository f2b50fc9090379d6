"""Device resolution: the one place that decides CUDA vs CPU vs the Triton interpreter.

Nothing here touches a GPU at import time. ``describe_machine()`` returns a flat dict
(GPU name, memory, SMs, driver, CUDA, torch, triton, Python, CPU model, cores) and
``machine_slug()`` the short name results are filed under (``h200``, ``cpu-xeon-2c``).
The description never holds user names, host names or environment-variable values.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import re
import subprocess
import sys
from typing import Literal

logger = logging.getLogger(__name__)

DeviceKind = Literal["cuda", "cpu"]
KernelMode = Literal["cuda", "interpret", "unavailable"]
Source = Literal["measured-gpu", "measured-cpu", "simulated", "interpreted"]

SOURCES: tuple[str, ...] = ("measured-gpu", "measured-cpu", "simulated", "interpreted")


def has_cuda() -> bool:
    """True when torch sees a usable CUDA device (and LABKIT_DEVICE does not force cpu)."""
    if os.environ.get("LABKIT_DEVICE", "").lower() == "cpu":
        return False
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver must not break the lab
        return False


def resolve_device(prefer: str | None = None) -> DeviceKind:
    """The device the lab runs on: ``prefer`` ("cuda"/"cpu"/"auto"/None) or LABKIT_DEVICE.

    Asking for cuda where there is none raises ``UsageError``.
    """
    from labkit.errors import UsageError

    choice = (prefer or os.environ.get("LABKIT_DEVICE") or "auto").lower()
    if choice == "auto":
        return "cuda" if has_cuda() else "cpu"
    if choice == "cpu":
        return "cpu"
    if choice == "cuda":
        if not has_cuda():
            raise UsageError("device 'cuda' was asked for but torch sees no CUDA GPU")
        return "cuda"
    raise UsageError(f"unknown device {choice!r}: use auto, cpu or cuda")


def kernel_mode() -> KernelMode:
    """How Triton kernels run here: on a GPU, under the interpreter, or not at all."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "interpret"
    if has_cuda():
        return "cuda"
    return "unavailable"


def configure_triton() -> KernelMode:
    """Switch Triton to its interpreter where there is no GPU.

    Must run before any ``@triton.jit`` function is defined (the interpreter flag is
    read at decoration time); kernel modules call it at the top.
    """
    if not has_cuda() and os.environ.get("TRITON_INTERPRET") != "1":
        os.environ["TRITON_INTERPRET"] = "1"
        logger.info("no CUDA GPU: Triton kernels run under the interpreter (correctness only)")
    mode = kernel_mode()
    language = sys.modules.get("triton.language")
    if mode == "interpret" and language is not None and type(language.zeros).__name__ == "JITFunction":
        # triton's own @jit library (tl.zeros, tl.sum, ...) was defined before the flag: every kernel
        # that calls it would fail inside the interpreter with "Cannot call @triton.jit'd outside ..."
        from labkit.errors import UsageError

        raise UsageError("triton was imported before its interpreter was switched on: set TRITON_INTERPRET=1 "
                         "before anything imports triton, or import labkit's kernels first")
    return mode


def measured_source(device: str) -> Source:
    """The results-store ``source`` for a measurement taken on ``device``."""
    return "measured-gpu" if str(device).startswith("cuda") else "measured-cpu"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def last_level_cache_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Size in bytes of the CPU's last-level cache as the kernel reports it (the highest level of
    ``root``'s ``index*/``, data or unified), or None where it does not say. On a virtual machine
    this is what the hypervisor reports, which may be the whole socket's cache shared with others."""
    best: tuple[int, int] | None = None
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return None
    for name in entries:
        if not name.startswith("index"):
            continue
        def read(field: str) -> str:
            with open(os.path.join(root, name, field), encoding="utf-8") as f:
                return f.read().strip()

        try:
            level, kind, size = int(read("level")), read("type"), read("size")
        except (OSError, ValueError):
            continue
        m = re.fullmatch(r"(\d+)\s*([KMG]?)", size)
        if kind == "Instruction" or m is None:
            continue
        nbytes = int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]
        if best is None or level > best[0]:
            best = (level, nbytes)
    return best[1] if best else None


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.stdout.strip().splitlines()
    return first[0].strip() if out.returncode == 0 and first else None


def _version(*distributions: str) -> str | None:
    """The installed version of the first of ``distributions`` found, read from its metadata: importing
    the package is not needed, and for triton it would freeze its library's ``@triton.jit`` functions in
    compiled mode before :func:`configure_triton` can switch on the interpreter."""
    from importlib import metadata

    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=4)
def describe_machine(device: str | None = None) -> dict:
    """A flat description of this machine: safe to publish (no user, host or env values)."""
    import torch

    kind = resolve_device(device)
    desc: dict = {"device": kind, "gpu_name": None, "gpu_memory_gib": None, "gpu_sm_count": None,
                  "gpu_capability": None, "driver": None, "cuda": torch.version.cuda, "torch": torch.__version__,
                  "triton": _version("triton", "pytorch-triton", "pytorch-triton-rocm"),
                  "python": platform.python_version(), "cpu_model": _cpu_model(), "cpu_cores": os.cpu_count(),
                  "os": f"{platform.system()} {platform.machine()}", "kernel_mode": kernel_mode()}
    if kind == "cuda":
        props = torch.cuda.get_device_properties(0)
        desc.update(gpu_name=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    gpu_sm_count=props.multi_processor_count, gpu_capability=f"{props.major}.{props.minor}",
                    driver=_nvidia_driver())
    desc["slug"] = machine_slug(desc)
    return desc


_GPU_WORDS = re.compile(r"(nvidia|geforce|tesla|quadro|graphics|pcie|sxm\d*|hbm\d*e?|\d+gb)", re.I)


def machine_slug(desc: dict | None = None) -> str:
    """Short folder name for results: ``h200``, ``a100``, ``rtx-4090``, ``cpu-xeon-2c``."""
    desc = desc if desc is not None else describe_machine()
    if desc.get("gpu_name"):
        words = _GPU_WORDS.sub(" ", desc["gpu_name"]).split()
        slug = "-".join(w.lower() for w in words) or "gpu"
    else:
        model = desc.get("cpu_model") or "cpu"
        low = model.lower()
        family = next(
            (f for f in ("xeon", "epyc", "ryzen", "core", "neoverse", "graviton", "apple") if f in low),
            re.sub(r"[^a-z0-9]+", "", low.split()[0]) if low.split() else "cpu",
        )
        slug = f"cpu-{family}-{desc.get('cpu_cores') or 0}c"
    return re.sub(r"[^a-z0-9.-]+", "-", slug.lower()).strip("-")


def add_cli_args(p) -> None:
    """``labkit env``'s options."""
    p.add_argument("--device", default=None, help="auto (default), cpu or cuda")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def main(args) -> int:
    """``labkit env``: this machine's description, as every result records it."""
    import json

    desc = describe_machine(args.device)
    if args.json:
        print(json.dumps(desc, indent=1))
    else:
        width = max(len(k) for k in desc)
        for key, value in desc.items():
            print(f"{key:<{width}}  {value}")
    return 0

