"""Range builders: the per-step image ranges of a batch, built four ways (the next bubble after #38794).

More: docs/reference.md, ``labkit.attn.range_builders``.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from labkit.attn.prefix_ranges import ranges_for_batch
from labkit.errors import UsageError

Range = tuple[int, int]
PREFIX_MODALITIES = ("image", "video")


class RangeBuilder:
    """Builds per-row image ranges for a batch of requests; options in docs/reference.md."""

    name = "base"
    summary = ""

    def __init__(self, *, sliding_window: int | None = None, clamp_sliding_window: bool = False,
                 span_pad: int = 0) -> None:
        if sliding_window is not None and (isinstance(sliding_window, bool) or not isinstance(sliding_window, int)
                                           or sliding_window < 0):
            raise UsageError(f"sliding_window must be None or an int >= 0, got {sliding_window!r}")
        if isinstance(span_pad, bool) or not isinstance(span_pad, int) or span_pad < 0:
            raise UsageError(f"span_pad must be an int >= 0, got {span_pad!r}")
        self.sliding_window = sliding_window or None
        self.clamp_sliding_window = bool(clamp_sliding_window)
        self.span_pad = span_pad

    # -- the v0.33 rule for one feature ----------------------------------------------------
    def feature_ranges(self, feature) -> list[Range]:
        """The ranges one feature contributes (modality filter, padding, sliding-window rule)."""
        if getattr(feature, "modality", "image") not in PREFIX_MODALITIES:
            return []
        pad, window, clamp = self.span_pad, self.sliding_window, self.clamp_sliding_window
        out = []
        for start, end in feature.mm_position.extract_embeds_range():
            if pad:
                start = max(0, start - pad)
            if window is not None and not clamp and end - start + 1 > window:
                continue
            out.append((start, end))
        return out

    def update(self, added: Iterable = (), removed: Iterable = ()) -> None:
        """Requests that joined (``Request`` objects) and left (requests or request ids) since the last step."""

    def build(self, requests: Sequence) -> list[list[Range]]:
        """Per batch row, the ranges of that row's request (``[]`` for ``None`` rows)."""
        out = []
        ranges_of = self._ranges_of
        for req in requests:
            row: list[Range] = []
            if req is not None:
                for feature in req.mm_features:
                    row.extend(ranges_of(feature))
            out.append(row)
        return out

    def _ranges_of(self, feature) -> list[Range]:
        return self.feature_ranges(feature)


class PR38794Builder(RangeBuilder):
    """The runner at #38794: ``extract_embeds_range()`` of every feature of every request, every step."""

    name = "pr38794"
    summary = "every step, every feature (PR-era runner)"

    def __init__(self, **options) -> None:
        super().__init__(**options)
        if self.sliding_window or self.span_pad or self.clamp_sliding_window:
            raise UsageError("the pr38794 builder has no sliding_window / span_pad options (added later upstream)")

    def build(self, requests):
        return ranges_for_batch(requests)


class V033Builder(RangeBuilder):
    """vLLM 0.33 ``compute_mm_prefix_ranges``: every step, every image feature, with the options."""

    name = "v033"
    summary = "every step, every image feature (vLLM 0.33)"


class CachedBuilder(RangeBuilder):
    """Each placeholder's ranges computed once, keyed by the ``mm_position`` object (kept alive)."""

    name = "cached"
    summary = "per-placeholder ranges computed once"

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self._memo: dict[int, tuple[object, list[Range]]] = {}

    def _ranges_of(self, feature) -> list[Range]:
        pos = feature.mm_position
        hit = self._memo.get(id(pos))
        if hit is None or hit[0] is not pos:
            hit = (pos, self.feature_ranges(feature))
            self._memo[id(pos)] = hit
        return hit[1]

    def update(self, added=(), removed=()):
        for req in removed:
            for feature in getattr(req, "mm_features", ()):
                self._memo.pop(id(feature.mm_position), None)

    def __len__(self) -> int:
        return len(self._memo)


class IncrementalBuilder(RangeBuilder):
    """A map ``request_id -> ranges`` kept up to date as requests join and leave (``update``).

    ``build`` returns the same list objects while nothing changes; an unseen or changed request
    is recomputed on the spot, so the map is never stale.
    """

    name = "incremental"
    summary = "per-request ranges updated as requests join and leave"

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self._by_id: dict[str, tuple[object, int, list[Range]]] = {}
        self.recomputed = 0

    def _compute(self, req) -> list[Range]:
        row: list[Range] = []
        for feature in req.mm_features:
            row.extend(self.feature_ranges(feature))
        self._by_id[req.request_id] = (req, len(req.mm_features), row)
        self.recomputed += 1
        return row

    def update(self, added=(), removed=()):
        for req in removed:
            self._by_id.pop(getattr(req, "request_id", req), None)
        for req in added:
            self._compute(req)

    def build(self, requests):
        out = []
        get = self._by_id.get
        for req in requests:
            if req is None:
                out.append([])
                continue
            entry = get(req.request_id)
            if entry is None or entry[0] is not req or entry[1] != len(req.mm_features):
                out.append(self._compute(req))
            else:
                out.append(entry[2])
        return out

    def __len__(self) -> int:
        return len(self._by_id)


#: builder name -> class; construct with ``cls(sliding_window=..., clamp_sliding_window=..., span_pad=...)``
RANGE_BUILDERS: dict[str, type[RangeBuilder]] = {
    cls.name: cls for cls in (PR38794Builder, V033Builder, CachedBuilder, IncrementalBuilder)
}


def make_builder(name: str, **options) -> RangeBuilder:
    """Build the range builder registered as ``name`` (``UsageError`` for an unknown name)."""
    try:
        cls = RANGE_BUILDERS[name]
    except KeyError:
        raise UsageError(f"unknown range builder {name!r}: one of {', '.join(RANGE_BUILDERS)}") from None
    return cls(**options)
