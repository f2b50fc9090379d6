"""Figures and tables of vLLM itself (notebooks 07-08).

``inside_vllm`` (the census of vLLM's engine step), ``census_checks`` (the census's checks),
``mmproc`` (vLLM's own processor benchmark beside the lab's), ``nextbubble`` (the next bubble,
installed vs patched) and ``serve_sim`` (#40143's published table beside the simulated run).
"""
