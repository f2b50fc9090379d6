"""vLLM's own tests as the judge of the A/B variants, and the installed vLLM against the official wheel.

CI tooling beside the package (it imports labkit; labkit never imports it), run from the repository
root: ``python -m scripts.vllm_own.run`` (``make test-vllm-own``) and ``python -m
scripts.vllm_own.wheel_diff``. ``own_tests`` (the chosen files, the comparison of runs), ``run`` (the
matrix, filed as ``vllm_own_tests``), ``sdist`` and ``hub_models`` (what the tests need), ``pytest_ab``
(the pytest plugin that applies a variant) and ``wheel_diff``. More: scripts/vllm_own/README.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from labkit.errors import UsageError
from labkit.results import format_command


def run_cli(parser: argparse.ArgumentParser, main: Callable[[argparse.Namespace], int],
            argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run ``main``; bad input is one line naming the command and exit 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.command = format_command([*parser.prog.split(), *argv])
    try:
        return int(main(args) or 0)
    except UsageError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
