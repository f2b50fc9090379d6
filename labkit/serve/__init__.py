"""labkit.serve: a whole serving benchmark run (``vllm bench serve``) on a simulated clock.

More: docs/reference.md, ``labkit.serve``.
"""
