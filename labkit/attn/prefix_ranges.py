"""Multimodal prefix ranges: the per-step tensor of image ranges the Triton attention kernel reads (vLLM #38794).

More: docs/reference.md, ``labkit.attn.prefix_ranges``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Iterable, Optional

import torch

from labkit.attn.ledger import TransferLedger
from labkit.errors import UsageError

logger = logging.getLogger(__name__)

Range = tuple[int, int]
#: ranges per batch row: a dict ``row -> list`` (as vLLM passes it) or a list per row
RangesInput = Mapping[int, Sequence[Range]] | Sequence[Optional[Sequence[Range]]]

_TRIVIAL: list[Range] = [(0, 0)]
_BYTES_PER_RANGE = 8  # two int32


# -- ranges from requests --------------------------------------------------------------

def ranges_for_batch(requests: Iterable, sliding_window: int | None = None) -> list[list[Range]]:
    """Per batch row, its request's inclusive image ranges, as vLLM's runner builds them every step.

    ``None`` rows and requests without images give ``[]``; with ``sliding_window`` a range longer
    than the window is dropped (vLLM 0.20.0, #40534).
    """
    out: list[list[Range]] = []
    for req in requests:
        row: list[Range] = []
        if req is not None:
            for feature in req.mm_features:
                if sliding_window is None:
                    row.extend(feature.mm_position.extract_embeds_range())
                else:
                    row.extend(r for r in feature.mm_position.extract_embeds_range()
                               if r[1] - r[0] + 1 <= sliding_window)
        out.append(row)
    return out


# -- validation and padding ------------------------------------------------------------

def _check_num_seqs(num_seqs) -> int:
    if isinstance(num_seqs, bool) or not isinstance(num_seqs, int) or num_seqs < 0:
        raise UsageError(f"num_seqs must be an int >= 0, got {num_seqs!r}")
    return num_seqs


def _as_mapping(ranges: RangesInput) -> Mapping:
    """``ranges`` as vLLM's ``{row: ranges}`` dict (a list per row is the lab's shorthand)."""
    if isinstance(ranges, Mapping):
        return ranges
    if isinstance(ranges, (str, bytes)) or not isinstance(ranges, Sequence):
        raise UsageError(f"ranges must be a dict row -> list or a list per row, got {type(ranges).__name__}")
    return {i: r for i, r in enumerate(ranges) if r is not None}


def _rows(ranges: RangesInput | None, num_seqs: int) -> list[Sequence[Range]]:
    """Per-row range lists for rows ``0 .. num_seqs - 1`` (``[]`` for missing rows; others ignored, as in vLLM)."""
    if ranges is None:
        return [[] for _ in range(num_seqs)]
    get = _as_mapping(ranges).get
    return [get(i) or [] for i in range(num_seqs)]


def normalize_ranges(ranges: RangesInput | None, num_seqs: int) -> list[list[Range]]:
    """Validated per-row lists of ``(start, end)`` int tuples; ``[]`` for missing rows.

    Raises ``ValueError`` (``UsageError``) for a negative ``num_seqs`` or a range that is not
    a pair of ints. Accepts what vLLM accepts from its runner: rows beyond ``num_seqs`` are
    ignored, and ``end < start`` (``extract_embeds_range`` of an empty placeholder gives
    ``(offset, offset - 1)``) and negative positions are kept (the kernel's ``start < end``
    test makes such ranges inert).
    """
    _check_num_seqs(num_seqs)
    out = []
    for i, row in enumerate(_rows(ranges, num_seqs)):
        clean = []
        for j, pair in enumerate(row):
            try:
                start, end = pair
            except (TypeError, ValueError):
                raise UsageError(f"row {i}, range {j}: {pair!r} is not a (start, end) pair") from None
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
                raise UsageError(f"row {i}, range {j}: {pair!r} must hold ints")
            clean.append((start, end))
        out.append(clean)
    return out


def pad_ranges(rows: Sequence[Sequence[Range]]) -> tuple[list[list[Range]] | None, int]:
    """vLLM's host-side padding with ``(0, 0)``: ``(padded, max_ranges)``, or ``(None, 0)`` if all rows are trivial."""
    range_lists = [r if r else _TRIVIAL for r in rows]
    if all(r == _TRIVIAL for r in range_lists):
        return None, 0
    max_ranges = max(len(r) for r in range_lists)
    padded = [list(r) + [(0, 0)] * (max_ranges - len(r)) for r in range_lists]
    return padded, max_ranges


def build_prefix_range_tensor(
    ranges: RangesInput | None, num_seqs: int, device: str | torch.device = "cpu"
) -> torch.Tensor | None:
    """The exact output of vLLM's ``compute_mm_prefix_range_tensor``, on vLLM's input domain.

    int32 ``(num_seqs, max_ranges, 2)`` of inclusive ``(start, end)`` absolute positions;
    rows padded with ``(0, 0)``; missing or empty rows are ``[(0, 0)]`` + padding; ``None``
    when every row is trivial (including ``num_seqs <= 0``). One copy to ``device``.

    Same algorithm as vLLM's, with no checks of its own, so every input vLLM takes gives the
    same tensor or the same exception (from ``torch.tensor``/``view``): keys outside
    ``[0, num_seqs)`` are ignored, ``end < start`` and negative values pass through, a row
    counts as trivial only when it equals ``[(0, 0)]``. Beyond vLLM's domain the lab also
    takes a list per row (``None`` rows missing); anything else is a ``UsageError``.
    """
    if ranges is None:
        return None
    get = _as_mapping(ranges).get
    range_lists = [get(i, _TRIVIAL) or _TRIVIAL for i in range(num_seqs)]
    if all(r == _TRIVIAL for r in range_lists):
        return None
    max_ranges = max(len(r) for r in range_lists)
    padded = [list(r) + [(0, 0)] * (max_ranges - len(r)) for r in range_lists]
    return torch.tensor(padded, dtype=torch.int32, device=device).view(num_seqs, max_ranges, 2)


# -- strategies ------------------------------------------------------------------------

class PrefixRangeStrategy:
    """Gives every attention layer of a step its prefix-range tensor; copies and host time go to ``self.ledger``.

    ``validate=False`` skips the per-range checks, as vLLM does.
    """

    name = "base"
    summary = ""

    def __init__(self, device: str | torch.device = "cpu", *, validate: bool = True) -> None:
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        self.validate = validate
        self.ledger = TransferLedger(self.name, str(self.device))
        self._rows: list[Sequence[Range]] = []
        self._t: torch.Tensor | None = None

    def begin_step(self, ranges: RangesInput | None, num_seqs: int) -> None:
        """Start a step whose batch rows have ``ranges`` (dict row -> list, or list per row)."""
        self.ledger.begin_step()
        with self.ledger.timed():
            if self.validate:
                rows: list[Sequence[Range]] = normalize_ranges(ranges, num_seqs)
            else:
                rows = _rows(ranges, _check_num_seqs(num_seqs))
            self._rows = rows
            self._begin(rows, num_seqs)

    def tensor_for_layer(self, layer_idx: int) -> torch.Tensor | None:
        """The ``(num_seqs, max_ranges, 2)`` int32 tensor for layer ``layer_idx`` (or None)."""
        with self.ledger.timed():
            return self._tensor(layer_idx)

    def end_step(self) -> None:
        """Finish the step."""
        self.ledger.end_step()

    # subclasses
    def _begin(self, rows: list[Sequence[Range]], num_seqs: int) -> None:
        raise NotImplementedError

    def _tensor(self, layer_idx: int) -> torch.Tensor | None:
        return self._t

    # shared helpers
    def _upload(self, padded: list, num_seqs: int, max_ranges: int, *, pinned: bool) -> torch.Tensor:
        if pinned:
            # Pinned staging only where CUDA exists; the caching host allocator keeps the staging
            # buffer alive until the asynchronous copy has finished.
            host = torch.tensor(padded, dtype=torch.int32, pin_memory=self.is_cuda)
            t = host.to(self.device, non_blocking=True).view(num_seqs, max_ranges, 2)
        else:
            t = torch.tensor(padded, dtype=torch.int32, device=self.device).view(num_seqs, max_ranges, 2)
        self.ledger.record_copy(num_seqs * max_ranges * _BYTES_PER_RANGE, pinned=pinned, synchronizing=not pinned,
                                what="padded")
        self.ledger.record_upload()
        return t


class PerLayerStrategy(PrefixRangeStrategy):
    """Before #38794: ``num_seqs`` pageable copies and a jagged nested pad on every layer's access."""

    name = "per_layer"
    summary = "pre-#38794: num_seqs pageable copies + nested pad on every layer"

    def __init__(self, device="cpu", *, validate=True) -> None:
        super().__init__(device, validate=validate)
        self.nested_ok = True

    def _begin(self, rows, num_seqs) -> None:
        pass  # like the old metadata: only the dict is stored

    def _tensor(self, layer_idx):
        range_lists = [r or _TRIVIAL for r in self._rows]
        if all(r == _TRIVIAL for r in range_lists):
            return None
        record = self.ledger.record_copy
        self.ledger.record_upload()
        tensors = []
        for r in range_lists:
            tensors.append(torch.tensor(r, dtype=torch.int32, device=self.device).view(-1, 2))  # (n_i, 2)
            record(len(r) * _BYTES_PER_RANGE, pinned=False, synchronizing=True, what="row", layer=layer_idx)
        if self.nested_ok:
            try:
                nt = torch.nested.nested_tensor(tensors, layout=torch.jagged)
                # jagged construction uploads the per-row lengths (int64) with torch.tensor(..., device)
                record(len(tensors) * 8, pinned=False, synchronizing=True, what="nested_offsets",
                       layer=layer_idx)
                return nt.to_padded_tensor(0)  # (num_seqs, max_ranges, 2)
            except (RuntimeError, NotImplementedError, TypeError) as exc:
                self.nested_ok = False
                logger.warning("jagged nested tensors unavailable (%s); padding rows directly", exc)
        max_ranges = max(t.shape[0] for t in tensors)
        out = torch.zeros((len(tensors), max_ranges, 2), dtype=torch.int32, device=self.device)
        for i, t in enumerate(tensors):
            out[i, : t.shape[0]] = t
        return out


class PerStepStrategy(PrefixRangeStrategy):
    """#38794: pad on the host once per step, one pageable copy, the same tensor for every layer."""

    name = "per_step"
    summary = "#38794: one pageable copy per step, shared by all layers"

    def _begin(self, rows, num_seqs) -> None:
        padded, max_ranges = pad_ranges(rows)
        self._t = None if padded is None else self._upload(padded, num_seqs, max_ranges, pinned=False)


class PinnedStrategy(PrefixRangeStrategy):
    """#41434: as ``per_step`` but staged in pinned memory and copied with ``non_blocking=True``."""

    name = "pinned"
    summary = "#41434: one pinned non-blocking copy per step"

    def _begin(self, rows, num_seqs) -> None:
        padded, max_ranges = pad_ranges(rows)
        self._t = None if padded is None else self._upload(padded, num_seqs, max_ranges, pinned=True)


class CachedStrategy(PrefixRangeStrategy):
    """Upload only when the batch's ranges change (exact compare against a snapshot of the rows).

    Each change builds a fresh device tensor, so a layer never reads one a later upload overwrites.
    """

    name = "cached"
    summary = "no copy while the ranges are unchanged; fresh tensor on change"

    def __init__(self, device="cpu", *, validate=True) -> None:
        super().__init__(device, validate=validate)
        self._snapshot: list[list[Range]] | None = None
        self._snap_n = -1
        self.hits = 0
        self.misses = 0

    def _begin(self, rows, num_seqs) -> None:
        if self._snapshot is not None and num_seqs == self._snap_n and rows == self._snapshot:
            self.hits += 1
            return
        self.misses += 1
        padded, max_ranges = pad_ranges(rows)
        self._t = None if padded is None else self._upload(padded, num_seqs, max_ranges, pinned=True)
        self._snapshot = [list(r) for r in rows]
        self._snap_n = num_seqs

    def invalidate(self) -> None:
        """Forget the cached tensor: the next step uploads."""
        self._snapshot, self._t, self._snap_n = None, None, -1


#: strategy name -> class; construct with ``cls(device)``
PREFIX_RANGE_STRATEGIES: dict[str, type[PrefixRangeStrategy]] = {
    cls.name: cls for cls in (PerLayerStrategy, PerStepStrategy, PinnedStrategy, CachedStrategy)
}


def make_strategy(name: str, device: str | torch.device = "cpu", **kwargs) -> PrefixRangeStrategy:
    """Build the strategy registered as ``name`` (``UsageError`` for an unknown name)."""
    try:
        cls = PREFIX_RANGE_STRATEGIES[name]
    except KeyError:
        raise UsageError(f"unknown prefix-range strategy {name!r}: one of {', '.join(PREFIX_RANGE_STRATEGIES)}") from None
    return cls(device, **kwargs)


def warm_up(device: str | torch.device = "cpu") -> None:
    """Run every strategy once on a two-row batch, so torch's first-use imports land in no measured step."""
    for cls in PREFIX_RANGE_STRATEGIES.values():
        s = cls(device, validate=False)
        s.begin_step({0: [(0, 1)], 1: [(2, 4), (6, 7)]}, 2)
        s.tensor_for_layer(0)
        s.end_step()
