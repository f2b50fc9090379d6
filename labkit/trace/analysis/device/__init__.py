"""What a trace's device streams did, and why they waited.

``bubbles`` (idle gaps per stream and their causes, HTA's conventions), ``cuda_graphs`` (graph
replays as units, device-level idle), ``h2d`` (host-to-device copies: pageable vs pinned, who
issued them) and ``idle`` (the busy/idle figures other parts of the lab read).
"""
