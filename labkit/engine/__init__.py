"""labkit.engine: a mini vLLM-style engine (schedule -> metadata -> forward -> sample) on a real or
simulated device, so host overhead shows up as device idle time.

Modules: ``config`` (model/engine presets), ``profiles`` (simulated-device durations),
``devices`` (``TorchDevice``, ``SimDevice``), ``model`` (transformer stack), ``loop`` (``Engine``),
``sim_trace`` (Kineto export), ``record_profile`` (GPU profile recording), ``bench`` (CLI).
"""
