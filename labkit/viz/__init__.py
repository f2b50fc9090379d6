"""The lab's plotly figures (each returns a ``go.Figure``) and the tables beside them.

Here, what every figure shares: ``labels`` (bounded titles), ``sources`` (how a number's source
looks), ``tables`` (tables a person reads), ``notebook`` (notebook set-up) and ``timeline`` (host threads and device streams as lanes). The figures
themselves are in ``lab`` (the lab's own models and kernels), ``vllm`` (vLLM's engine step, the
next bubble, the serving run) and ``machines`` (the recorded results across machines).
"""
