"""What a trace's device streams did: ``bubbles`` (idle gaps and causes), ``cuda_graphs``, ``h2d`` (copies)
and ``idle`` (the figures other parts of the lab read).
"""
