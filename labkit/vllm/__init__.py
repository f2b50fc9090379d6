"""The lab's vLLM-facing code: what runs against (or files results from) an installed vLLM.

More: docs/reference.md, ``labkit.vllm``.
"""
