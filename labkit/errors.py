"""The lab's error types: bad input is a ``UsageError`` (one line, exit code 2); a report run
stopped by a signal is a ``ReportStopped`` (raised by ``labkit report``'s kernel client and its
notebook runs alike).
"""

import signal


class UsageError(ValueError):
    """Bad input from a user: the CLI prints the message on one line and exits with 2."""


class ReportStopped(Exception):
    """The run was stopped by a signal (SIGINT, SIGTERM); ``signum`` names it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
