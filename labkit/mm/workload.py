"""Synthetic multimodal workloads: seeded requests with images laid out like a real model's prompt.

More: docs/reference.md, ``labkit.mm.workload``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

import torch

from labkit.errors import UsageError, choice
from labkit.mm.placeholder import get_placeholder_class

__all__ = ["MMFeature", "Request", "ImageLayout", "IMAGE_LAYOUTS", "WorkloadSpec", "WORKLOAD_PRESETS",
           "get_workload_spec", "make_requests", "make_request", "placeholder_layout"]

IntOrRange = int | tuple[int, int]


@dataclass(frozen=True, slots=True)
class MMFeature:
    """One multimodal item of a request (vLLM's ``MultiModalFeatureSpec`` minus the data).

    ``identifier`` is the encoder-cache key (equal for identical images); ``mm_position``
    a placeholder range of any variant.
    """

    identifier: str
    mm_position: object
    modality: str = "image"


class Request:
    """A request as the scheduler sees it.

    ``prompt_len`` and ``output_len`` in tokens; ``mm_features`` sorted by placeholder
    offset. ``num_computed_tokens`` counts tokens whose KV is (scheduled to be) computed;
    ``num_output_tokens`` counts sampled tokens. ``num_tokens = prompt_len +
    num_output_tokens`` is the number of known tokens.
    """

    __slots__ = (
        "request_id", "prompt_len", "output_len", "mm_features",
        "num_computed_tokens", "num_output_tokens", "has_encoder_inputs",
    )

    def __init__(self, request_id: str, prompt_len: int, output_len: int, mm_features=()) -> None:
        feats = list(mm_features)
        if prompt_len < 1 or output_len < 1:
            raise ValueError(f"request {request_id}: prompt_len and output_len must be >= 1")
        prev_end = 0
        for f in feats:
            pos = f.mm_position
            if pos.offset < prev_end:
                raise ValueError(f"request {request_id}: mm_features must be sorted by offset and not overlap")
            if pos.offset + pos.length > prompt_len:
                raise ValueError(f"request {request_id}: placeholder {pos.offset}+{pos.length} outside the prompt")
            prev_end = pos.offset + pos.length
        self.request_id = request_id
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.mm_features = feats
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.has_encoder_inputs = bool(feats)

    @property
    def num_tokens(self) -> int:
        """Known tokens: prompt plus sampled outputs."""
        return self.prompt_len + self.num_output_tokens

    @property
    def num_encoder_inputs(self) -> int:
        return len(self.mm_features)

    @property
    def is_finished(self) -> bool:
        return self.num_output_tokens >= self.output_len

    def get_num_encoder_embeds(self, input_id: int) -> int:
        """Encoder embeddings of item ``input_id`` (calls the placeholder's ``get_num_embeds()``)."""
        return self.mm_features[input_id].mm_position.get_num_embeds()

    def reset(self) -> None:
        """Back to the state before any scheduling."""
        self.num_computed_tokens = 0
        self.num_output_tokens = 0

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, prompt_len={self.prompt_len}, output_len={self.output_len}, "
                f"images={len(self.mm_features)}, computed={self.num_computed_tokens}, "
                f"outputs={self.num_output_tokens})")


@dataclass(frozen=True)
class ImageLayout:
    """How a model lays out one image in the prompt.

    ``begin_tokens``/``end_tokens`` are non-embedding marker tokens around the soft tokens;
    ``masked`` says whether placeholders carry an ``is_embed`` mask (else None);
    ``fixed_tokens`` soft tokens per image whatever its size, else one per ``patch_px``
    square patch.
    """

    name: str
    begin_tokens: int
    end_tokens: int
    masked: bool
    fixed_tokens: int | None
    patch_px: int = 28

    def tokens_for_size(self, height: int, width: int) -> int:
        """Soft (embedding) tokens for one image of ``height`` x ``width`` pixels."""
        if height < 1 or width < 1:
            raise UsageError(f"image size must be positive, got {height}x{width}")
        if self.fixed_tokens is not None:
            return self.fixed_tokens
        return math.ceil(height / self.patch_px) * math.ceil(width / self.patch_px)


IMAGE_LAYOUTS: dict[str, ImageLayout] = {
    "gemma": ImageLayout("gemma", begin_tokens=1, end_tokens=1, masked=True, fixed_tokens=256),
    "plain": ImageLayout("plain", begin_tokens=0, end_tokens=0, masked=False, fixed_tokens=None),
}


def placeholder_layout(model: str, soft_tokens: int) -> tuple[int, torch.Tensor | None]:
    """``(length, is_embed)`` of one placeholder with ``soft_tokens`` embeddings under ``model``."""
    preset = _layout(model)
    length = preset.begin_tokens + soft_tokens + preset.end_tokens
    if not preset.masked:
        return length, None
    mask = torch.zeros(length, dtype=torch.bool)  # (length,)
    mask[preset.begin_tokens:preset.begin_tokens + soft_tokens] = True
    return length, mask


@dataclass(frozen=True)
class WorkloadSpec:
    """A seeded synthetic workload. Counts may be ``int`` or an inclusive ``(lo, hi)`` range drawn per item.

    ``image_size`` is ``(height, width)`` in pixels; ``tokens_per_image`` (soft tokens)
    overrides the model's size rule. ``duplicate_image_prob`` is the chance an image
    repeats an earlier one (half the time from the same request when it has one).
    """

    num_requests: int
    images_per_request: IntOrRange
    image_size: tuple[int, int] = (1024, 1536)
    tokens_per_image: IntOrRange | None = None
    text_tokens_between_images: int = 8
    prefix_text_tokens: int = 16
    suffix_text_tokens: int = 32
    output_len: IntOrRange = 128
    model: str = "gemma"
    duplicate_image_prob: float = 0.0
    seed: int = 0
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        _layout(self.model)
        if self.num_requests < 1:
            raise UsageError(f"num_requests must be >= 1, got {self.num_requests}")
        _check_range("images_per_request", self.images_per_request, 0)
        _check_range("output_len", self.output_len, 1)
        if self.tokens_per_image is not None:
            _check_range("tokens_per_image", self.tokens_per_image, 0)
        for key in ("text_tokens_between_images", "prefix_text_tokens", "suffix_text_tokens"):
            if getattr(self, key) < 0:
                raise UsageError(f"{key} must be >= 0")
        if self.prefix_text_tokens + self.suffix_text_tokens < 1:
            raise UsageError("a prompt needs at least one text token (prefix or suffix)")
        if not 0.0 <= self.duplicate_image_prob <= 1.0:
            raise UsageError(f"duplicate_image_prob must be in [0, 1], got {self.duplicate_image_prob}")

    def with_(self, **changes) -> "WorkloadSpec":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


def _check_range(name: str, value: IntOrRange, lo: int) -> None:
    vals = value if isinstance(value, tuple) else (value, value)
    if len(vals) != 2 or not all(isinstance(v, int) for v in vals) or vals[0] > vals[1] or vals[0] < lo:
        raise UsageError(f"{name} must be an int >= {lo} or an ordered (lo, hi) pair, got {value!r}")


def _draw(rng: random.Random, value: IntOrRange) -> int:
    return rng.randint(*value) if isinstance(value, tuple) else value


def _layout(name: str) -> ImageLayout:
    return choice(IMAGE_LAYOUTS, name, "image layout")


#: named workloads; ``pr40143`` is the shape of the PR's benchmark (Gemma, 128 x 32 images of
#: 1024x1536, ~1024 text tokens and 8000 output tokens per request: 1,024,000 output tokens
#: in all, as the published duration x throughput implies); ``pr40143-short`` keeps 256 output
#: tokens, enough for a steady decode phase with all 128 requests running
WORKLOAD_PRESETS: dict[str, WorkloadSpec] = {
    "pr40143": WorkloadSpec(128, 32, (1024, 1536), None, 8, 512, 256, 8000, "gemma", 0.0, 0, name="pr40143"),
    "pr40143-short": WorkloadSpec(128, 32, (1024, 1536), None, 8, 512, 256, 256, "gemma", 0.0, 0,
                                  name="pr40143-short"),
    "quick": WorkloadSpec(32, 8, (1024, 1536), None, 8, 64, 32, 32, "gemma", 0.0, 0, name="quick"),
    "small": WorkloadSpec(8, 4, (448, 448), 16, 4, 8, 8, 8, "gemma", 0.0, 0, name="small"),
    "tiny": WorkloadSpec(3, 2, (224, 224), 6, 2, 4, 4, 3, "plain", 0.0, 0, name="tiny"),
    "dup": WorkloadSpec(6, (0, 5), (448, 448), (4, 24), 3, 4, 4, (1, 6), "gemma", 0.4, 0, name="dup"),
}


def get_workload_spec(name: str) -> WorkloadSpec:
    """The preset ``name``; UsageError names the choices."""
    return choice(WORKLOAD_PRESETS, name, "workload")


_TEMPLATES: dict = {}  #: (spec, placeholder class) -> requests built once and never handed out
_TEMPLATES_MAX = 8


def make_requests(spec: WorkloadSpec, variant: str = "list") -> list[Request]:
    """Fresh requests (ids ``req-0``, ...) of ``spec`` with ``variant`` placeholders; same layout for every variant."""
    cls = get_placeholder_class(variant)
    try:
        tpl = _TEMPLATES.get((spec, cls))
    except TypeError:  # an unhashable field value: build without the cache
        return _build_requests(spec, cls)
    if tpl is None:
        tpl = _build_requests(spec, cls)
        if len(_TEMPLATES) >= _TEMPLATES_MAX:
            _TEMPLATES.pop(next(iter(_TEMPLATES)))
        _TEMPLATES[(spec, cls)] = tpl
    return [Request(r.request_id, r.prompt_len, r.output_len,
                    [MMFeature(f.identifier, _fresh(f.mm_position), f.modality) for f in r.mm_features])
            for r in tpl]


def _fresh(p):
    """A new placeholder from a never-read template: a shallow copy (empty lazy caches); ``__slots__`` ones shared."""
    d = getattr(p, "__dict__", None)
    if d is None:
        return p
    new = object.__new__(type(p))
    new.__dict__.update(d)
    return new


def _build_requests(spec: WorkloadSpec, cls) -> list[Request]:
    preset = _layout(spec.model)
    rng = random.Random(spec.seed)
    seen: list[tuple[str, int]] = []  # (identifier, soft tokens) of every image so far
    requests = []
    for r in range(spec.num_requests):
        n_images = _draw(rng, spec.images_per_request)
        output_len = _draw(rng, spec.output_len)
        pos = spec.prefix_text_tokens
        feats = []
        own: list[tuple[str, int]] = []
        for _ in range(n_images):
            if seen and rng.random() < spec.duplicate_image_prob:
                pool = own if own and rng.random() < 0.5 else seen
                ident, soft = pool[rng.randrange(len(pool))]
            else:
                soft = (_draw(rng, spec.tokens_per_image) if spec.tokens_per_image is not None
                        else preset.tokens_for_size(*spec.image_size))
                ident = f"img-{spec.seed}-{len(seen)}"
            seen.append((ident, soft))
            own.append((ident, soft))
            length, mask = placeholder_layout(spec.model, soft)
            feats.append(MMFeature(ident, cls(pos, length, mask)))
            pos += length + spec.text_tokens_between_images
        prompt_len = pos + spec.suffix_text_tokens
        requests.append(Request(f"req-{r}", prompt_len, output_len, feats))
    return requests


def make_request(request_id: str, prompt_len: int, positions: list[tuple[int, int]] = (), *,
                 identifiers: list[str] | None = None, is_embed: list[torch.Tensor | None] | None = None,
                 output_len: int = 1, variant: str = "list") -> Request:
    """One hand-built request with placeholders at ``(offset, length)`` positions."""
    cls = get_placeholder_class(variant)
    positions = list(positions)
    idents = identifiers or [f"{request_id}-{i}" for i in range(len(positions))]
    masks = is_embed or [None] * len(positions)
    if len(idents) != len(positions) or len(masks) != len(positions):
        raise ValueError("identifiers and is_embed must match positions in length")
    feats = [MMFeature(i, cls(off, ln, m)) for (off, ln), i, m in zip(positions, idents, masks)]
    return Request(request_id, prompt_len, output_len, feats)
