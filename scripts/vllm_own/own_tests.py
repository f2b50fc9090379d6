"""vLLM's own unit tests as the judge of the A/B variants: ``make test-vllm-own``.

More: scripts/vllm_own/README.md.
"""

from __future__ import annotations

import fnmatch
import logging
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import UsageError
from labkit.vllm.variants import VARIANTS

logger = logging.getLogger(__name__)

__all__ = ["FILE_SETS", "STOCK", "DEFAULT_VARIANTS", "TEST_DEPS", "EXPLAINED", "Explanation",
           "Outcome", "parse_junit", "counts", "compare_runs", "explain", "run_row", "choose_files", "choose_variants"]

#: the run without ``$LABKIT_VLLM_AB`` (vLLM as installed, no plugin applied)
STOCK = "stock"
#: what vLLM's tests need beyond the venv's packages (its conftest imports tblib; async tests)
TEST_DEPS = ("tblib==3.2.2", "pytest-asyncio==1.5.0")

#: the chosen files, by set (``FILES=core`` in CI); why each is chosen: docs/conformance.md
FILE_SETS: dict[str, tuple[str, ...]] = {
    # the scheduler (encoder inputs, chunked mm input, EAGLE shift) and its encoder cache
    "core": ("tests/v1/core/test_scheduler.py", "tests/v1/core/test_encoder_cache_manager.py"),
    # the async scheduler (output placeholders, the step after the encoder)
    "async": ("tests/v1/core/test_async_scheduler.py",),
    # PlaceholderRange itself and the placeholder helpers of vllm.multimodal
    "inputs": ("tests/multimodal/test_inputs.py", "tests/multimodal/test_utils.py"),
    # the scheduler with an encoder-cache connector (items loaded externally, shared across requests)
    "ec": ("tests/v1/ec_connector/unit/test_cross_encoder_cache.py",
           "tests/v1/ec_connector/unit/test_scheduler_nixl_consumer.py",
           "tests/v1/ec_connector/unit/test_scheduler_nixl_producer.py"),
    # streaming input: requests whose prompt (and images) grow while they run
    "streaming": ("tests/v1/streaming_input/test_scheduler_streaming.py",),
}

@dataclass(frozen=True)
class Explanation:
    """A known difference: tests matching ``pattern`` fail under every variant whose ``field`` is ``value``.

    ``why``: the rule the variant's vLLM had and the installed tests check (docs/conformance.md: "vLLM's own
    tests judge the variants").
    """

    pattern: str  # junit test id, fnmatch pattern
    field: str  # a Variant field: "placeholder" or "scheduler"
    value: str
    why: str


#: the differences the variants are meant to have (they model vLLM before a change the tests check)
EXPLAINED: tuple[Explanation, ...] = (
    Explanation("tests.multimodal.test_inputs::test_placeholder_range_embeds_cumsum[[]*", "placeholder", "tensor",
                "the pre-#40143 embeds_cumsum is a torch tensor, as vLLM cached it before #40143; "
                "the test compares it with the Python list #40143 made it"),
    Explanation("tests.v1.core.test_scheduler::test_no_mm_input_chunking[[]True[]]", "scheduler", "loop",
                "vLLM 0.20's loop checks the encoder cache before disable_chunked_mm_input: a cached image "
                "is a hit and the step runs into it; the installed rule rolls back first"),
    Explanation("tests.v1.core.test_scheduler::test_no_mm_input_chunking_for_same_step_duplicate", "scheduler",
                "loop", "vLLM 0.20's loop skips a same-step duplicate before disable_chunked_mm_input, so the "
                "step runs into the repeated image; the installed rule rolls back first"),
    Explanation("tests.v1.core.test_scheduler::test_mamba_align_eagle_schedules_encoder_at_boundary", "scheduler",
                "loop", "vLLM 0.20's loop ends the scheduled slice without the EAGLE shift: an image starting "
                "at the step's end has an empty slice and is not encoded; the installed slice includes the shift"),
)

_OUTCOMES = ("passed", "failed", "error", "skipped")


@dataclass(frozen=True)
class Outcome:
    """One test's result in one run: ``passed``, ``failed``, ``error`` or ``skipped``, and pytest's message."""

    outcome: str
    message: str = ""


def _first_line(text: str | None, limit: int = 300) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line[:limit]


def parse_junit(path: str | Path) -> dict[str, Outcome]:
    """Test id (``classname::name``) -> :class:`Outcome` from pytest's junit XML.

    A test case with an ``<error>`` as well as a ``<failure>`` (a teardown error after a
    failure) counts as failed; an error alone (setup or teardown) as ``error``. A case
    listed twice (call and teardown) keeps its worse outcome. ``UsageError`` for a file that
    is not junit XML.
    """
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise UsageError(f"cannot read junit XML {path}: {exc}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise UsageError(f"{path} is not junit XML (root <{root.tag}>)")
    rank = {"passed": 0, "skipped": 1, "error": 2, "failed": 3}
    out: dict[str, Outcome] = {}
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        tags = {child.tag: child for child in case}
        if "failure" in tags:
            outcome, node = "failed", tags["failure"]
        elif "error" in tags:
            outcome, node = "error", tags["error"]
        elif "skipped" in tags:
            outcome, node = "skipped", tags["skipped"]
        else:
            outcome, node = "passed", None
        message = _first_line(node.get("message") or node.text) if node is not None else ""
        prev = out.get(test_id)
        if prev is None or rank[outcome] > rank[prev.outcome]:
            out[test_id] = Outcome(outcome, message)
    return out


def counts(run: dict[str, Outcome]) -> dict[str, int]:
    """Tests per outcome (every outcome present, zeros included) and ``total``."""
    c = {k: 0 for k in _OUTCOMES}
    for o in run.values():
        c[o.outcome] += 1
    c["total"] = len(run)
    return c


def explain(variant: str, test_id: str) -> str | None:
    """The recorded explanation of a difference, or None when :data:`EXPLAINED` has none."""
    spec = VARIANTS.get(variant)
    if spec is None:
        return None
    for known in EXPLAINED:
        if getattr(spec, known.field) == known.value and fnmatch.fnmatchcase(test_id, known.pattern):
            return known.why
    return None


def compare_runs(stock: dict[str, Outcome], run: dict[str, Outcome], variant: str) -> dict[str, list[dict]]:
    """How ``run`` differs from ``stock``.

    ``differences``: tests that passed stock and failed or errored under the variant (each
    with the variant's message and the explanation, if recorded); ``missing``: tests stock
    ran that the variant run does not list; ``fixed``: tests that failed stock and pass
    under the variant (informational).
    """
    differences, missing, fixed = [], [], []
    for test_id, base in sorted(stock.items()):
        got = run.get(test_id)
        if got is None:
            missing.append({"test": test_id})
        elif base.outcome == "passed" and got.outcome in ("failed", "error"):
            differences.append({"test": test_id, "outcome": got.outcome, "message": got.message,
                                "explained": explain(variant, test_id)})
        elif base.outcome in ("failed", "error") and got.outcome == "passed":
            fixed.append({"test": test_id})
    return {"differences": differences, "missing": missing, "fixed": fixed}


def run_row(variant: str, run: dict[str, Outcome], wall_s: float, exit_code: int,
            stock: dict[str, Outcome] | None) -> dict:
    """The result row of one run: counts, failing and skipped ids (with reasons), the comparison."""
    row = {"variant": variant, **counts(run), "wall_s": round(wall_s, 1), "pytest_exit": exit_code,
           "failing": [{"test": t, "outcome": o.outcome, "message": o.message}
                       for t, o in sorted(run.items()) if o.outcome in ("failed", "error")],
           "skipped_tests": [{"test": t, "reason": o.message} for t, o in sorted(run.items())
                             if o.outcome == "skipped"]}
    reasons: dict[str, int] = {}
    for o in run.values():
        if o.outcome == "skipped":
            reasons[o.message] = reasons.get(o.message, 0) + 1
    row["skip_reasons"] = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    if stock is not None and variant != STOCK:
        cmp = compare_runs(stock, run, variant)
        row.update(cmp)
        row["unexplained"] = sum(1 for d in cmp["differences"] if not d["explained"])
    return row


def choose_files(spec: str | None) -> list[str]:
    """The test files of comma-separated set names (:data:`FILE_SETS`) or ``tests/`` paths; every set when empty."""
    if not spec:
        return [f for files in FILE_SETS.values() for f in files]
    chosen: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in FILE_SETS:
            chosen += FILE_SETS[item]
        elif item.startswith("tests/") and item.endswith(".py") and ".." not in item.split("/"):
            chosen.append(item)
        else:
            raise UsageError(f"unknown test file set {item!r}: choose from {', '.join(FILE_SETS)} "
                             "or give a path tests/....py")
    return list(dict.fromkeys(chosen))


#: the variants of the full matrix (``pr38794`` runs when named: its scheduler is baseline's loop;
#: ``merged`` is vLLM as installed: named, it is not run, the stock run is its run)
DEFAULT_VARIANTS = ("baseline", "pr40143", "merged", "early-return")


def choose_variants(spec: str | None) -> tuple[list[str], list[str]]:
    """``(runs, controls)`` of comma-separated variant names (:data:`DEFAULT_VARIANTS` when empty;
    ``all``: every one of :data:`VARIANTS`): the runs start with the stock one, and a variant that
    patches nothing (``merged``) is not run again but named among the stock run's ``controls``."""
    names = [s.strip() for s in (spec or "").split(",") if s.strip()] or list(DEFAULT_VARIANTS)
    if names == ["all"]:
        names = list(VARIANTS)
    for name in names:
        if name not in VARIANTS:
            raise UsageError(f"unknown vLLM A/B variant {name!r}: choose from {', '.join(VARIANTS)}")
    names = list(dict.fromkeys(names))
    return [STOCK] + [n for n in names if VARIANTS[n].patches], [n for n in names if not VARIANTS[n].patches]
