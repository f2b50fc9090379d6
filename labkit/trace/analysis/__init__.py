"""Analysing a trace: what the device and the host did, and why the device waited.

``analyze`` (``analyze_trace``: every table at once), ``diff`` (two traces), ``many`` (many traces
on workers), ``html`` (the offline page), ``cli`` (``labkit analyze``), ``bench`` (``labkit bench
trace``) and ``notebook`` (the trace lesson's helpers). The tables themselves: ``device`` (idle
gaps per stream and their causes, CUDA-graph replays, host-to-device copies, the idle figures
other parts of the lab read) and ``host`` (call sites, steps and vLLM's engine-step phases).
"""
