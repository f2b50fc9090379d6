"""vLLM's multimodal input processing, measured: #40143's images through the processor.

``bench_vllm_input`` (``labkit bench vllm-input``), ``mm_processor_bench`` (vLLM's own processor
benchmark beside the lab's: ``labkit bench vllm-mmproc``) and ``mmproc_compare`` (the two, stage by stage).
"""
