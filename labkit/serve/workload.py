"""The run #40143 published, as ``vllm bench serve`` made it: which requests, with what prompts.

More: docs/reference.md, ``labkit.serve.workload``.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import UsageError

__all__ = ["ServeWorkload", "WORKLOADS", "get_workload", "PlaceholderSpan", "prompt_layout", "make_vllm_requests"]


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


#: ``full``: #40143's published run; ``quick``: the same shape, small enough for tests
WORKLOADS = {
    "full": ServeWorkload("pr40143", 128, 32, 1024, 1536, 1024, 8000, 128),
    "quick": ServeWorkload("pr40143-quick", 4, 2, 1024, 1536, 64, 16, 4),
}


def get_workload(size: str) -> ServeWorkload:
    try:
        return WORKLOADS[size].check()
    except KeyError:
        raise UsageError(f"unknown size {size!r}: choose from {', '.join(WORKLOADS)}") from None


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
    from labkit.vllm.conformance.models import placeholder_layout

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
    prompt's images as ``MultiModalFeatureSpec`` with a ``PlaceholderRange(offset, length,
    is_embed)``, ``max_tokens = output_tokens`` and ``ignore_eos``."""
    import torch
    from vllm import SamplingParams
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
    from vllm.v1.request import Request

    prompt_len, spans = prompt_layout(workload)
    out = []
    for r in range(workload.requests):
        feats = [MultiModalFeatureSpec(data=None, modality="image", identifier=f"{prefix}{r}-img{k}",
                                       mm_position=PlaceholderRange(s.offset, s.length,
                                                                    torch.tensor(s.is_embed, dtype=torch.bool)))
                 for k, s in enumerate(spans)]
        out.append(Request(request_id=f"{prefix}{r}", prompt_token_ids=[0] * prompt_len,
                           sampling_params=SamplingParams(max_tokens=workload.output_tokens, ignore_eos=True),
                           pooling_params=None, mm_features=feats or None))
    return out
