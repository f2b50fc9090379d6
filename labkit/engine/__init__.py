"""labkit.engine: a mini vLLM-style engine (schedule -> metadata -> forward -> sample) on a real or
simulated device, so host overhead shows up as device idle time; the devices are in ``device``.
"""
