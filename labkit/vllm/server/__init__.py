"""The A/B inside vLLM's own server (``scripts/vllm_ab.sh``): ``vllm bench serve`` per variant.

``ab_results`` files each run's result as ``vllm_ab`` (``python -m labkit.vllm.ab ingest``);
``ab_view`` sets them beside the lab's own numbers (tables and a figure).
"""
