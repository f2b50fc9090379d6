"""labkit.engine: a mini vLLM-style engine (schedule -> metadata -> forward -> sample) on a real or
simulated device, so host overhead shows up as device idle time.

Modules: ``config`` (model/engine presets), ``model`` (transformer stack), ``graphs`` (CUDA-graph
modes, capture sizes, simulated replays), ``cudagraph_torch`` (real CUDA graphs), ``loop``
(``Engine``), ``runs`` (the variants run, measured then profiled), ``bench_engine`` (``labkit bench engine``), ``hostfrom``
(the simulated GPU fed with real vLLM's host), ``record_profile`` (GPU profile recording),
``recorded`` (recorded runs, before/after ratios). The devices it runs on are in ``device``
(``SimDevice``, ``TorchDevice``, simulated-device profiles, fixed host costs, Kineto export).
"""
