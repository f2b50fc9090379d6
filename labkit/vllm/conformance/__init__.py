"""vLLM's real engine on a CPU (``.venv-vllm-cpu``), and whether the lab's variants hold on it.

``models`` (made model folders), ``engine`` (the in-process driver), ``check`` (the real-engine
check), ``cli`` (``labkit vllm``), ``own_tests`` / ``own_tests_run`` (vLLM's own tests as the judge,
with ``sdist`` and ``hub_models``) and ``wheel_diff`` (the installed build against the official wheel).
"""
