"""labkit.serve: a whole serving benchmark run (``vllm bench serve``) on a simulated clock.

Everything here is simulated and says so (``source="simulated"``). :mod:`labkit.serve.device_model`
is the device side: how long one engine step of Gemma-4-E4B takes on an H100 or an H200.
"""
