"""labkit.attn: prefix-LM attention on vLLM's Triton path.

Modules (import what you need; this package imports nothing heavy):

- ``prefix_ranges``: the per-step prefix-range tensor and the strategies that hand it to
  every layer (before/after vLLM #38794, pinned, cached);
- ``ledger``: the host-to-device copy ledger and a profiler-trace H2D counter;
- ``range_builders``: building the batch's image ranges every step, four ways;
- ``bench_h2d`` / ``bench_ranges``: ``labkit bench h2d`` and ``labkit bench ranges``;
- ``prefix_mask`` / ``prefix_attention``: the mask rule and the attention kernel that reads the tensor.
"""
