"""What each lab page finds, as the answer box it opens with (one function per page, from recorded results)."""

from labkit.report.answers.element import Answer
from labkit.report.answers.gpu import h2d_prefix_ranges, idle_bubbles, prefix_attention, trace_analysis
from labkit.report.answers.host import compare_gpus, environment, placeholder_scheduler
from labkit.report.answers.vllm import inside_vllm_answer, next_bubble

__all__ = ["Answer", "environment", "placeholder_scheduler", "idle_bubbles", "h2d_prefix_ranges",
           "prefix_attention", "trace_analysis", "compare_gpus", "next_bubble", "inside_vllm_answer"]
