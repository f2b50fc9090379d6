"""Profiler traces (Kineto / Chrome-trace JSON): ``read`` (loading), ``analysis`` (``labkit analyze``),
``whatif`` (``labkit whatif``), ``capture`` (recording the lab's engine) and ``outputs`` (the commands'
files and offline pages). Guide: docs/trace-analyzer.md.
"""
