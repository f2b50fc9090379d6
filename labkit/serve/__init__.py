"""labkit.serve: a whole serving benchmark run (``vllm bench serve``) on a simulated clock.

Everything here is simulated and says so (``source="simulated"``), except vLLM's scheduler, which
runs for real. :mod:`~labkit.serve.workload` (the run ``vllm bench serve`` made),
:mod:`~labkit.serve.inputs` (the recorded inputs), :mod:`~labkit.serve.device` (the clock's device
protocol), :mod:`~labkit.serve.api_server` (the API server's one thread), :mod:`~labkit.serve.clock`
(the simulated clock), :mod:`~labkit.serve.vllm_driver` (vLLM's real scheduler, stepped),
:mod:`~labkit.serve.metrics` (what ``vllm bench serve`` reports), :mod:`~labkit.serve.breakdown`
(where the run's time went) and :mod:`~labkit.serve.bench` (``labkit bench serve-sim``). A step's
time comes from :mod:`~labkit.serve.gpu` (the device side: how long one engine step of Gemma-4-E4B
takes on an H100 or an H200) and :mod:`~labkit.serve.host` (each step's host time, and a recorded
host vs the GPU node's host). Importing the package never imports vLLM.
"""
