"""The host side of a simulated engine step: its host time, and the host it was recorded on.

``host_census`` (the phases of the census of vLLM's step), ``host_model`` (each step's host time,
the scheduler's own calls as measured here) and ``cpu_speed`` (a recorded host vs the GPU node's).
"""
