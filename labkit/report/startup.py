"""Start-up of the report's processes: an optional import that only costs time is left out.

Importing ``nbformat`` (the report reads and writes notebooks with it; a kernel imports it as
soon as plotly's renderers are set up) imports ``jsonschema``, which imports the optional
``rfc3987_syntax`` to offer its ``iri`` / ``iri-reference`` format checks, and that package builds
an Earley parser from its grammar at import: about a second of CPU in every such process here.
Nothing the report runs checks those formats (``nbformat`` validates without format checks), and
``jsonschema`` imports the module inside ``suppress(ImportError)``, so a process that marks it
absent (``sys.modules[name] = None``, Python's documented way to block an import) only skips
those two checks. The report does this in its own process (``labkit report``) and, through
``KERNEL_EXEC_LINES``, in each kernel it starts, before any cell runs. Notebooks opened in
JupyterLab are left as they are.
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
