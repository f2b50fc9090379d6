"""The vLLM A/B variants: which side of #40143 and #38794 an installed vLLM runs."""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import choice

__all__ = ["ENV_VAR", "Variant", "VARIANTS", "get_variant"]

#: environment variable read by :func:`load_plugin` in every vLLM process
ENV_VAR = "LABKIT_VLLM_AB"


@dataclass(frozen=True)
class Variant:
    """One A/B arm: which side of each PR the installed vLLM runs."""

    name: str
    placeholder: str  # "tensor" (before #40143) or "list" (after)
    prefix_range: str  # "per_layer" (before #38794) or "per_step" (after), as the lab spells its strategies
    description: str
    #: which encoder-input scheduler: "loop" (vLLM 0.20's walk over every image of every running
    #: request, as #40143 found and left it: :mod:`labkit.vllm.sched020`) or "window" (the installed
    #: scheduler; vLLM >= 0.21 bisects to the images inside the step's token window)
    scheduler: str = "window"
    #: beyond both PRs: the scheduler's early return once every item is computed
    #: (patches/vllm-0.33.0-encoder-early-return.diff, vLLM >= 0.21)
    early_return: bool = False

    @property
    def patches(self) -> bool:
        """Whether the variant changes the installed vLLM at all (``merged`` is vLLM as installed)."""
        return (self.placeholder, self.prefix_range, self.scheduler, self.early_return) != (
            "list", "per_step", "window", False)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("baseline", "tensor", "per_layer",
                "before both PRs (tensor cumsum, vLLM 0.20's per-image loop, per-layer prefix ranges)",
                scheduler="loop"),
        Variant("pr40143", "list", "per_layer",
                "#40143 as merged in vLLM 0.20 (list cumsum, the same per-image loop, per-layer prefix ranges)",
                scheduler="loop"),
        Variant("pr38794", "tensor", "per_step",
                "#38794 only (tensor cumsum, vLLM 0.20's per-image loop, per-step prefix ranges)", scheduler="loop"),
        Variant("merged", "list", "per_step", "vLLM as installed (both PRs, the installed windowed scheduler)"),
        Variant("early-return", "list", "per_step", "as installed + the scheduler's early return (next step)",
                early_return=True),
    )
}


def get_variant(name: str) -> Variant:
    """The variant registered as ``name``; ``UsageError`` lists the choices."""
    return choice(VARIANTS, name, "vLLM A/B variant")
