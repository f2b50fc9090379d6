"""vLLM's multimodal input processing, measured: #40143's images through the processor."""
