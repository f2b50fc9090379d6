"""The in-process check on vLLM's real engine: ``labkit vllm check`` and ``make test-vllm-cpu``.

More: docs/reference.md, ``labkit.vllm.conformance.check``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

__all__ = ["PLACEHOLDER_SITES", "SITE_RANK", "CheckReport", "run_check", "trace_findings"]

#: call-site names that are the scheduler's per-image placeholder work
PLACEHOLDER_SITES = ("get_num_embeds", "_try_schedule_encoder_inputs")
#: the baseline's placeholder calls must be among this many top host call sites between steps
SITE_RANK = 10


@dataclass
class CheckReport:
    """Findings of :func:`run_check`; ``checks`` maps a check's name to ``(passed, detail)``."""

    build: dict
    shape: dict
    model: dict
    variants: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)
    #: every distinct image placeholder vLLM made: ``length``, ``num_embeds``, ``is_embed`` (as 0/1 text)
    placeholders: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(passed for passed, _ in self.checks.values())

    def add(self, name: str, passed: bool, detail: str) -> None:
        self.checks[name] = (bool(passed), detail)

    def lines(self) -> list[str]:
        b, s = self.build, self.shape
        out = [f"vLLM {b['version']} ({b['distribution']}, {b['platform']}); model {self.model['arch']} "
               f"(config {self.model['config_hash']}); {s['requests']} requests x {s['images']} images of "
               f"{s['height']}x{s['width']} px (HxW), {s['output_len']} output tokens"]
        for v in self.variants.values():
            calls = "-" if v["min_decode_calls"] is None else f"{v['min_decode_calls']}..{v['max_decode_calls']}"
            out.append(f"  {v['variant']:<13} {v['wall_s']:7.2f} s  {v['steps']:>4} steps  "
                       f"get_num_embeds per decode step {calls} ({v['decode_steps']} decode steps)")
        for name, (passed, detail) in self.checks.items():
            out.append(f"{'ok  ' if passed else 'FAIL'} {name}: {detail}")
        out.append("all checks passed" if self.ok else "some checks FAILED")
        return out

    def to_json(self) -> dict:
        return {"ok": self.ok, "build": self.build, "shape": self.shape, "model": self.model,
                "variants": self.variants, "placeholders": self.placeholders,
                "checks": {k: {"passed": p, "detail": d} for k, (p, d) in self.checks.items()}}


def trace_findings(path: str | Path, *, top: int = SITE_RANK) -> dict:
    """What ``labkit analyze`` reads in one of vLLM's CPU traces: steps, device events, top host call sites."""
    from labkit.trace import Trace

    an = Trace(path)
    sites = an.host_call_sites()
    return {"trace": str(path), "steps": int(len(an.steps())), "steps_source": an.step_detection().get("source"),
            "has_device_events": bool(an.source()["has_device_events"]),
            "top_host_call_sites": [] if sites is None else sites.head(top)["call_site"].tolist(),
            "phases": sorted(set(an.step_phases()["phase"]))}


def run_check(model_dir: str | Path, shape, variants: Sequence[str], *, run_dir: str | Path | None = None,
              traces: str | Path | None = None, json_out: str | Path | None = None) -> CheckReport:
    """Build one engine for ``model_dir``, run every variant, check the findings; see the module text."""
    from labkit.vllm.conformance.models import config_hash, model_arch, placeholder_layout

    arch = model_arch(model_dir)
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-check-") as tmp:
        run = Path(run_dir) if run_dir is not None else Path(tmp)
        run.mkdir(parents=True, exist_ok=True)
        dest = Path(traces) if traces is not None else run / "traces"
        report, runs = _run(model_dir, arch, shape, variants, run, dest)
        report.model = {"arch": arch, "folder": str(model_dir), "config_hash": config_hash(model_dir)}
        expected = placeholder_layout(arch, shape.width, shape.height)
        _check_placeholders(report, runs[variants[0]].placeholders, expected, shape)
        if json_out is not None:
            from labkit.fileio import write_json

            write_json(json_out, report.to_json())
    return report


def _run(model_dir, arch, shape, variants, run: Path, dest: Path) -> tuple[CheckReport, dict]:
    from labkit.vllm.ab import scheduler_has_window
    from labkit.vllm.conformance.engine import build_engine, make_requests, run_variants, shape_dict, shutdown_engine, vllm_build
    from labkit.vllm.variants import VARIANTS

    llm = build_engine(model_dir, run, images_per_prompt=shape.images, profile_dir=run / "profile",
                       max_num_seqs=max(shape.requests, 1))
    report = CheckReport(build=vllm_build(), shape=shape_dict(shape), model={"arch": arch})
    requests = make_requests(model_dir, shape)
    runs = {}
    try:
        for r in run_variants(llm, requests, shape, variants, profile=(run / "profile", dest)):
            runs[r.variant] = r
            report.variants[r.variant] = r.summary(shape.requests)
    finally:
        shutdown_engine(llm)
    first = runs[variants[0]]
    same = [v for v in variants if runs[v].tokens == first.tokens]
    report.add("tokens identical across variants", len(same) == len(variants),
               f"{len(same)} of {len(variants)} variants match {variants[0]}'s tokens")
    if shape.requests > 1:
        distinct = len({tuple(t) for t in first.tokens})
        report.add("images reach the model", distinct > 1,
                   f"{distinct} distinct token sequences among {shape.requests} requests with different images")
    window = scheduler_has_window()
    for v in variants:
        decode = runs[v].decode_steps()
        if not decode:
            report.add(f"{v}: decode steps counted", False, "no pure decode step")
            continue
        if VARIANTS[v].scheduler == "loop":
            short = [s for s in decode if s.num_embeds_calls < s.requests * shape.images]
            full = runs[v].decode_calls(shape.requests)
            report.add(f"{v}: get_num_embeds per decode step >= running requests x images", not short,
                       f"{len(decode) - len(short)} of {len(decode)} decode steps"
                       + (f"; with all {shape.requests} requests running: min {min(full)} (requests x images = "
                          f"{shape.requests * shape.images})" if full else ""))
        elif window:
            calls = [s.num_embeds_calls for s in decode]
            report.add(f"{v}: no get_num_embeds in decode steps", max(calls) == 0,
                       f"max {max(calls)} over {len(calls)} decode steps")
    for v in variants:
        if not runs[v].traces:
            continue
        found = trace_findings(runs[v].traces[0])
        report.variants[v]["trace_analysis"] = found
        report.add(f"{v}: trace read", found["steps"] > 0 and not found["has_device_events"],
                   f"{found['steps']} steps from {found['steps_source']} markers, "
                   f"device events: {'yes' if found['has_device_events'] else 'none'}")
        if VARIANTS[v].placeholder == "tensor":
            hits = [s for s in found["top_host_call_sites"]
                    if any(f"): {name}" in s or s.endswith(name) for name in PLACEHOLDER_SITES)]
            report.add(f"{v}: placeholder calls among the top {SITE_RANK} host call sites", bool(hits),
                       "; ".join(hits) if hits else "none of " + ", ".join(PLACEHOLDER_SITES))
    return report, runs


def _check_placeholders(report: CheckReport, seen: dict, expected, shape) -> None:
    distinct = {(length, mask) for items in seen.values() for _, length, mask in items}
    report.placeholders = [{"length": length, "num_embeds": length if mask is None else sum(mask),
                            "is_embed": None if mask is None else "".join("1" if x else "0" for x in mask)}
                           for length, mask in sorted(distinct, key=lambda lm: (lm[0], lm[1] or ()))]
    bad = []
    for req, items in seen.items():
        if len(items) != shape.images:
            bad.append(f"{req}: {len(items)} images")
        for offset, length, mask in items:
            got = (length, tuple(mask) if mask is not None else None)
            if got != (expected.length, expected.is_embed):
                n = sum(mask) if mask else None
                bad.append(f"{req}@{offset}: length {length}, {n} embeds")
    report.add("placeholders as the model's rules give", bool(seen) and not bad,
               (f"{len(seen)} requests, each image {expected.length} tokens with {expected.num_embeds} embeddings"
                if not bad else "; ".join(bad[:4])))
