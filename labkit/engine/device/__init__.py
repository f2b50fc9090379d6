"""The devices the mini engine runs on, behind one interface.

``devices`` (``SimDevice``, the simulated GPU stream, and ``make_device``; ``TorchDevice`` from
``torch_device``: real torch on CUDA or the CPU), ``profiles`` (simulated-device durations),
``hostcost`` (a fixed host cost model) and ``sim_trace`` (Kineto export of a simulated timeline, and the capture of a run on either device).
"""
