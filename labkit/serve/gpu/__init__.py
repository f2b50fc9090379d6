"""The device side of a simulated engine step: how long it takes on a GPU (simulated).

``gemma4_arch`` (Gemma-4-E4B's shapes as numbers), ``device_model`` (a roofline per part, summed)
and ``device_efficiency`` (how much of the GPU's peak each part reaches, from the H200 recordings).
"""
