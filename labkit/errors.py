"""The lab's error types: bad input is a ``UsageError`` (one line, exit code 2)."""


class UsageError(ValueError):
    """Bad input from a user: the CLI prints the message on one line and exits with 2."""
