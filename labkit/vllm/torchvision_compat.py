"""Let the registry's torchvision import beside a CPU-only torch (``.venv-vllm-cpu`` only).

More: docs/reference.md, ``labkit.vllm.torchvision_compat``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from pathlib import Path

__all__ = ["install", "compiled_ops_load", "SCHEMAS"]

#: the operators torchvision registers fake kernels for without checking that they exist
SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

_state = {"declared": False, "library": None}


def compiled_ops_load(package_dir: str | Path) -> bool:
    """Whether torchvision's ``_C`` library in ``package_dir`` can be loaded by the dynamic linker."""
    import ctypes

    libs = sorted(Path(package_dir).glob("_C*.so"))
    if not libs:
        return False
    try:
        import torch  # noqa: F401  (its libraries must be loaded first, as torchvision does)

        ctypes.CDLL(str(libs[0]))
    except OSError:
        return False
    return True


def _declare_schemas() -> None:
    import torch

    if _state["declared"]:
        return
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for schema in SCHEMAS:
        name = schema.split("(", 1)[0]
        if not hasattr(torch.ops.torchvision, name):
            lib.define(schema)
    _state["library"] = lib  # the schemas live as long as the library object
    _state["declared"] = True


class _Finder(importlib.abc.MetaPathFinder):
    """Runs once, just before ``torchvision`` itself is imported."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.submodule_search_locations:
            package_dir = next(iter(spec.submodule_search_locations))
            if not compiled_ops_load(package_dir):
                _declare_schemas()
        return spec


def install() -> None:
    """Put the hook in front of ``torchvision``'s import (no-op once torchvision is imported)."""
    if "torchvision" in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
