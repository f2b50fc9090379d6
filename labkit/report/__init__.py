"""labkit.report: run the notebooks headless (``execute``, ``client``) and export the offline report
(``build``, ``exporter``, ``index``, ``frontpage``); each page's answer box (``answers``).

The report's processes block one optional import that only costs time (:func:`skip_unused_imports`):
``nbformat`` imports ``jsonschema``, which imports ``rfc3987_syntax`` for two format checks nothing
here runs, and that package builds an Earley parser at import, about a second of CPU per process.
``jsonschema`` imports it inside ``suppress(ImportError)``, so marking it absent only skips those
checks. ``labkit report`` does it in its own process and, through ``KERNEL_EXEC_LINES``, in each
kernel it starts; notebooks opened in JupyterLab are left as they are.
"""

from __future__ import annotations

import sys

#: optional modules the report's processes never use, blocked before anything imports them
SKIPPED_IMPORTS = ("rfc3987_syntax",)

#: the same, as the kernel's start-up code (``--IPKernelApp.exec_lines``)
KERNEL_EXEC_LINES = [f"import sys as _s; [_s.modules.setdefault(_m, None) for _m in {SKIPPED_IMPORTS!r}]; del _s"]


def skip_unused_imports() -> None:
    """Block the imports of ``SKIPPED_IMPORTS`` in this process (one already imported stays)."""
    for name in SKIPPED_IMPORTS:
        sys.modules.setdefault(name, None)
