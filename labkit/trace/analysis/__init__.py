"""Analysing a trace: what the device and the host did, and why the device waited.

``analyze`` (``analyze_trace``: every table at once), ``bubbles`` (idle gaps per stream and their
causes, HTA's conventions), ``cuda_graphs`` (graph replays as units, device-level idle), ``steps``
(step detection and phases), ``hostonly`` (call sites between steps of a host-only trace), ``h2d`` (host-to-device copies), ``callsite`` (what a host thread was
inside), ``idle`` (the figures other parts of the lab read), ``diff`` (two traces), ``many`` (many
traces on workers), ``html`` (the offline page), ``cli`` (``labkit analyze``), ``bench``
(``labkit bench trace``) and ``notebook`` (the trace lesson's helpers).
"""
