"""Host time measured on vLLM's real code, per A/B variant.

The whole engine step, phase by phase (``step_census``, its ``step_timers`` and
``step_checks``; ``bench_vllm_step``: ``labkit bench vllm-step``; ``step_whatif``), the scheduler step
alone (``sched_census``; ``bench_vllm_sched``: ``labkit bench vllm-sched``) and the next bubble,
``compute_mm_prefix_ranges`` installed vs patched (``prefix_ranges_patch``; ``bench_vllm_prefix_ranges``: ``labkit bench vllm-prefix-ranges``).
"""
