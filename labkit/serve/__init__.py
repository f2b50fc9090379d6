"""labkit.serve: #40143's published table beside the one step model's full-batch peaks, priced on the PR's host.

More: docs/reference.md, ``labkit.serve``.
"""
