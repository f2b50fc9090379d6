"""The device side of a simulated engine step: how long it takes on a GPU (simulated).

``device_model`` (a roofline per part of Gemma-4-E4B, :data:`labkit.facts.GEMMA4_E4B`, summed)
and ``device_efficiency`` (how much of the GPU's peak each part reaches, from the H200 recordings).
"""
