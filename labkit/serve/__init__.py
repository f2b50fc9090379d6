"""labkit.serve: a whole serving benchmark run (``vllm bench serve``) on a simulated clock.

Everything here is simulated and says so (``source="simulated"``), except vLLM's scheduler, which
runs for real. :mod:`~labkit.serve.workload` (the run ``vllm bench serve`` made),
:mod:`~labkit.serve.device_model` (the device side: how long one engine step of Gemma-4-E4B takes
on an H100 or an H200), :mod:`~labkit.serve.device` (the clock's device protocol),
:mod:`~labkit.serve.cpu_speed` (a recorded host vs the GPU node's host),
:mod:`~labkit.serve.host_census` / :mod:`~labkit.serve.host_model` (each step's host time),
:mod:`~labkit.serve.api_server` (the API server's one thread), :mod:`~labkit.serve.clock` (the
simulated clock), :mod:`~labkit.serve.metrics` (what ``vllm bench serve`` reports),
:mod:`~labkit.serve.vllm_driver` (vLLM's real scheduler, stepped), :mod:`~labkit.serve.bench`
(``labkit bench serve-sim``). Importing the package never imports vLLM.
"""
