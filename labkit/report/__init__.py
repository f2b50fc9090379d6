"""labkit.report: run the notebooks headless and export the offline report; each page's answer box.

:func:`skip_unused_imports` marks ``rfc3987_syntax`` absent (``jsonschema`` imports it optionally, for
checks nothing here runs, and it costs about a second per process); notebooks in JupyterLab are untouched.
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
