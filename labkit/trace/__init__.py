"""Profiler traces (Kineto / Chrome-trace JSON): ``Trace(path)`` analyses one (``TraceSet(folder)`` a profile
folder of several ranks); ``read`` (loading), ``analysis`` (``labkit analyze``), ``whatif`` (``labkit whatif``),
``capture`` (recording on a real device) and ``outputs`` (the commands' files). Guide: docs/trace-analyzer.md.
"""


def __getattr__(name: str):
    # ``from labkit.trace import Trace``: imported on first use, so ``labkit.trace.capture`` stays light
    if name == "Trace":
        from labkit.trace.analysis.trace import Trace

        return Trace
    if name == "TraceSet":
        from labkit.trace.analysis.many import TraceSet

        return TraceSet
    raise AttributeError(f"module 'labkit.trace' has no attribute {name!r}")
