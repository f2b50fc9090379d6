"""What a trace's host threads did: ``callsite`` (call sites), ``steps`` (the one step finder),
``engine_steps`` (vLLM's engine step by phase).
"""
