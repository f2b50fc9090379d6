"""Profiler traces (Kineto / Chrome-trace JSON), in three parts and two helpers.

- ``labkit.trace.read``: reading a trace into column tables (the streaming reader, the column
  store, loading with its bad-input policy, trimming a trace file);
- ``labkit.trace.analysis``: what a trace says (idle bubbles and their causes, CUDA-graph
  replays, steps, host-to-device copies, call sites, comparisons, many traces at once;
  ``labkit analyze``);
- ``labkit.trace.whatif``: what a change would buy (the run's dependency graph replayed with
  cheaper host work or copies that do not synchronize; ``labkit whatif``);
- ``capture``: recording traces of the lab's engine (torch.profiler, or the simulated device);
- ``outputs``: the output files of the trace commands, checked first and written all or none.
"""
