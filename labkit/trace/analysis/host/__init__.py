"""What a trace's host threads did: call sites and steps.

``callsite`` (what a host thread was inside), ``steps`` (step detection and phases), ``hostonly``
(call sites between steps of a host-only trace) and ``engine_steps`` (vLLM's engine step, phase by
phase, from its own profiler trace).
"""
