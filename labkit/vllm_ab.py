"""Old import path of the vLLM A/B plugin, kept for vLLM's plugin entry point.

``pyproject.toml`` registers ``labkit.vllm_ab:load_plugin`` in the ``vllm.general_plugins``
group, and environments installed before the move still point there. Everything lives in
:mod:`labkit.vllm.ab`; this module only re-exports the plugin hook.
"""

from labkit.vllm.ab import load_plugin

__all__ = ["load_plugin"]
