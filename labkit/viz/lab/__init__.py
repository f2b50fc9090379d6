"""Figures of the lab's own models and kernels (notebooks 01-04).

``mm`` (the scheduler half, #40143), ``engine`` (the mini engine per variant), ``h2d`` (the
prefix-range copies, #38794) and ``mask`` / ``roofline`` (the prefix-LM attention kernel).
"""
