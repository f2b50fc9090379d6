"""The A/B inside vLLM's own server (``scripts/vllm_ab.sh``): ``vllm bench serve`` per variant."""
