"""The lab's vLLM-facing code: what runs against (or files results from) an installed vLLM.

Here, the A/B switch and what is named from outside the package.

More: docs/reference.md, ``labkit.vllm``.
"""
