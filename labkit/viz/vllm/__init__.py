"""Figures and tables of vLLM itself (notebooks 07-08).

``pr_table`` (#40143's published table beside the one step model's prediction), ``inside_vllm``
(the census of vLLM's engine step), ``census_checks`` (the census's checks) and ``prefix_ranges`` (the
next bubble, installed vs patched).
"""
