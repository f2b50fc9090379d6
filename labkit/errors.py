"""The lab's error types: bad input is a ``UsageError`` (one line, exit code 2); a report run
stopped by a signal is a ``ReportStopped`` (raised by ``labkit report``'s kernel client and its
notebook runs alike). :func:`choice` is the one check of a name against its choices.
"""

import signal


class UsageError(ValueError):
    """Bad input from a user: the CLI prints the message on one line and exits with 2."""


def choice(choices, name, what: str, error: type[ValueError] = UsageError):
    """``choices[name]`` when ``choices`` is a dict, else ``name``, where ``name`` is one of ``choices``; else
    ``error`` saying ``unknown <what> <name>: choose from <the choices>``."""
    if name not in choices:
        raise error(f"unknown {what} {name!r}: choose from {', '.join(choices)}")
    return choices[name] if isinstance(choices, dict) else name


class ReportStopped(Exception):
    """The run was stopped by a signal (SIGINT, SIGTERM); ``signum`` names it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
