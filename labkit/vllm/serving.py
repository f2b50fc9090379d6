"""#40143's serving run against vLLM's real scheduler: the run ``vllm bench serve`` made (which
requests, with what prompts) and vLLM's scheduler at a server's settings.

More: docs/reference.md, ``labkit.vllm.serving``.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import UsageError, choice
from labkit.vllm.census.sched_census import make_scheduler, vllm_requests
from labkit.vllm.conformance.models import placeholder_layout

__all__ = ["ServeWorkload", "WORKLOADS", "get_workload", "PlaceholderSpan", "prompt_layout", "make_vllm_requests",
           "SERVE_DEFAULTS", "ServeConfig", "kv_blocks_for", "make_serving_scheduler",
           "runner_output"]


@dataclass(frozen=True)
class ServeWorkload:
    """One ``vllm bench serve`` run: requests (all sent at t = 0), images per request and their size
    (pixels, ``height x width`` as random-mm's bucket keys), random text tokens, output tokens."""

    name: str
    requests: int
    images: int
    image_height: int
    image_width: int
    text_tokens: int
    output_tokens: int
    max_concurrency: int

    def check(self) -> "ServeWorkload":
        if self.requests < 1 or self.images < 0 or self.text_tokens < 0 or self.output_tokens < 1:
            raise UsageError(f"workload {self.name}: requests >= 1, images >= 0, text >= 0, output >= 1")
        return self

    def describe(self) -> dict:
        return {"workload": self.name, "requests": self.requests, "images_per_request": self.images,
                "image_size": f"{self.image_height}x{self.image_width}", "text_tokens": self.text_tokens,
                "output_tokens": self.output_tokens, "max_concurrency": self.max_concurrency,
                "request_rate": "inf (all sent at t = 0)", "ignore_eos": True}


#: ``full``: #40143's published run
WORKLOADS = {"full": ServeWorkload("pr40143", 128, 32, 1024, 1536, 1024, 8000, 128)}


def get_workload(size: str) -> ServeWorkload:
    return choice(WORKLOADS, size, "size").check()


@dataclass(frozen=True)
class PlaceholderSpan:
    """One image's placeholder in the prompt: first token, length (tokens), which tokens are embeddings."""

    offset: int
    length: int
    is_embed: tuple

    @property
    def num_embeds(self) -> int:
        return sum(self.is_embed)


def prompt_layout(workload: ServeWorkload) -> tuple[int, list[PlaceholderSpan]]:
    """``(prompt tokens, placeholders)`` of one request: the text split into ``images + 1`` runs
    as evenly as it divides (the first runs one token longer), an image after each run but the last."""
    layout = placeholder_layout("gemma4", workload.image_width, workload.image_height)
    runs = workload.images + 1
    base, extra = divmod(workload.text_tokens, runs)
    pos, spans = 0, []
    for k in range(workload.images):
        pos += base + (1 if k < extra else 0)
        spans.append(PlaceholderSpan(pos, layout.length, tuple(layout.is_embed)))
        pos += layout.length
    pos += base + (1 if workload.images < extra else 0)
    return pos, spans


def make_vllm_requests(workload: ServeWorkload, *, prefix: str = "r") -> list:
    """vLLM ``Request`` objects, one per request of ``workload``, ids ``<prefix><index>``: the
    prompt's images at their placeholders (:func:`prompt_layout`), ``max_tokens = output_tokens``
    and ``ignore_eos``."""
    prompt_len, spans = prompt_layout(workload)
    return vllm_requests(workload.requests, prompt_len, [(s.offset, s.length, s.is_embed) for s in spans],
                         max_tokens=workload.output_tokens, prefix=prefix)


#: ``vllm serve`` on an H100/H200 (vLLM's ``_set_default_max_num_seqs_and_batched_tokens_args``)
SERVE_DEFAULTS = {"max_num_batched_tokens": 8192, "max_num_seqs": 1024, "enable_chunked_prefill": True,
                  "async_scheduling": True, "enable_prefix_caching": False}


@dataclass(frozen=True)
class ServeConfig:
    """The scheduler's settings; ``num_blocks`` of ``block_size`` tokens in the KV cache."""

    max_num_batched_tokens: int = SERVE_DEFAULTS["max_num_batched_tokens"]
    max_num_seqs: int = SERVE_DEFAULTS["max_num_seqs"]
    async_scheduling: bool = SERVE_DEFAULTS["async_scheduling"]
    max_model_len: int = 32768
    block_size: int = 16
    num_blocks: int = 0
    max_item_tokens: int = 262
    encoder_budget: int = 0  #: the encoder's budget where above the batched tokens (a run's own)


def kv_blocks_for(requests: int, prompt_tokens: int, output_tokens: int, block_size: int = 16) -> int:
    """KV blocks so that every request's prompt and output (and one token of slack) fit at once."""
    per = -(-(prompt_tokens + output_tokens + 2) // block_size)
    return requests * per + 16


def make_serving_scheduler(model_dir, config: ServeConfig):
    """vLLM's ``AsyncScheduler`` (or ``Scheduler`` when ``async_scheduling`` is off) for the
    generated model config in ``model_dir``, with ``config``'s settings."""
    return make_scheduler(model_dir, max_num_batched_tokens=config.max_num_batched_tokens,
                          max_num_seqs=config.max_num_seqs, max_model_len=config.max_model_len,
                          num_blocks=config.num_blocks, block_size=config.block_size,
                          max_item_tokens=config.max_item_tokens, async_scheduling=config.async_scheduling,
                          encoder_budget=config.encoder_budget, enable_chunked_prefill=True)


def runner_output(scheduler, out):
    """The ``ModelRunnerOutput`` a forward of ``out`` (a scheduler output) returns: one token for each
    request whose prompt is in by the step's end (``num_computed_tokens`` already counts the step), none
    for the others."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(out.num_scheduled_tokens)
    reqs = [scheduler.requests[rid] for rid in ids]
    sampled = [[0] if r.num_computed_tokens >= r.num_prompt_tokens else [] for r in reqs]
    return ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
                             sampled_token_ids=sampled)
