"""labkit.attn: prefix-LM attention on vLLM's Triton path.

Modules (import what you need; this package imports nothing heavy).

More: docs/reference.md, ``labkit.attn``.
"""
