"""labkit.engine: a mini vLLM-style engine (schedule -> metadata -> forward -> sample) on a real or
simulated device, so host overhead shows up as device idle time.

Modules: ``config`` (model/engine presets), ``profiles`` (simulated-device durations),
``devices`` (``SimDevice``; ``TorchDevice`` from ``torch_device``), ``hostcost`` (fixed host cost
model), ``model`` (transformer stack), ``graphs`` (CUDA-graph modes, capture sizes, simulated
replays), ``cudagraph_torch`` (real CUDA graphs), ``loop`` (``Engine``), ``sim_trace`` (Kineto
export), ``record_profile`` (GPU profile recording), ``recorded`` (recorded runs, before/after
ratios), ``bench`` (CLI).
"""
