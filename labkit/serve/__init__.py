"""#40143's whole published benchmark run, predicted with vLLM's own scheduler on a simulated clock.

:mod:`~labkit.serve.workload` (the run ``vllm bench serve`` made), :mod:`~labkit.serve.device`
(the injected device-time model), :mod:`~labkit.serve.cpu_speed` (this CPU vs the GPU node's
host), :mod:`~labkit.serve.host_census` (the census's host phases per step),
:mod:`~labkit.serve.api_server` (the API server's one thread), :mod:`~labkit.serve.clock`
(the simulated clock), :mod:`~labkit.serve.metrics` (what ``vllm bench serve`` reports),
:mod:`~labkit.serve.vllm_driver` (vLLM's real scheduler, stepped), :mod:`~labkit.serve.bench`
(``labkit bench serve-sim``). Importing the package never imports vLLM.
"""
