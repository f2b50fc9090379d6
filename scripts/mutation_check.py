#!/usr/bin/env python3
"""Mutation check: plant known bugs in labkit's core, one at a time, and make sure the tests catch each.

Each mutation replaces one exact source snippet with a wrong one. The snippet is searched in
every module under ``labkit/`` (so a module may move to another package without this list
changing) and must occur exactly once there. Everything happens in a temporary copy of the
tree (the files git tracks plus untracked ones it does not ignore); the working tree is never
written. For each mutation only its own test files run, stopping at the first failure.

Then the tests that caught them run once more on the unmutated copy and must pass there: a
test that fails anyway proves nothing about the mutation.

    python scripts/mutation_check.py            # every mutation (make mutation-check)
    python scripts/mutation_check.py --list     # what each one plants, and where
    python scripts/mutation_check.py --only prefix-mask-range-end whatif-scale-ignored

Exit status: 0 every mutation caught; 1 a mutation survived (the tests passed with the bug in
place); 2 a mutation does not apply (its snippet is not found exactly once), a test path is
missing, the unmutated tests fail, or bad usage.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "labkit"
#: seconds one pytest run may take before it counts as hanging
RUN_TIMEOUT_S = 300
#: never copied (environments, caches, build outputs); git's own ignore rules apply where git is present
SKIP_DIRS = {".git", ".venv", ".venv-vllm", "node_modules", "__pycache__", ".pytest_cache", ".hypothesis",
             "reports", "build", "dist", "wheelhouse"}


@dataclass(frozen=True)
class Mutation:
    """One planted bug: ``old`` (exact source text under labkit/) becomes ``new``; ``tests`` must catch it."""

    name: str
    what: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "placeholder-cumsum-prefix",
        "the fast placeholder's zero-prefixed cumsum loses its leading 0 (every slice end off by one)",
        "self._cum0 = [0, *cumsum]",
        "self._cum0 = list(cumsum)",
        ("tests/test_placeholder.py",),
    ),
    Mutation(
        "placeholder-list-cumsum-start",
        "the #40143 list placeholder reads the slice start one position late",
        "embeds_start = self.embeds_cumsum[start_idx - 1] if start_idx > 0 else 0",
        "embeds_start = self.embeds_cumsum[start_idx] if start_idx > 0 else 0",
        ("tests/test_placeholder.py",),
    ),
    Mutation(
        "idle-kernel-wait-flipped",
        "idle classification: gaps longer than the kernel-wait threshold counted as kernel wait",
        "kernel_wait = ~host_wait & (g_dur < kernel_wait_us)",
        "kernel_wait = ~host_wait & (g_dur > kernel_wait_us)",
        ("tests/test_trace_bubbles.py",),
    ),
    Mutation(
        "idle-total-drops-kernel-wait",
        "a stream's idle total leaves out its kernel-wait gaps",
        'out["idle_us"] = out["idle_host_wait_us"] + out["idle_kernel_wait_us"] + out["idle_other_us"]\n'
        '    out["busy_us"] = out["span_us"] - out["idle_us"]\n',
        'out["idle_us"] = out["idle_host_wait_us"] + out["idle_other_us"]\n'
        '    out["busy_us"] = out["span_us"] - out["idle_us"]\n',
        ("tests/test_trace_bubbles.py",),
    ),
    Mutation(
        "copy-pinned-kind",
        "the trace's pinned host-to-device copies counted as pageable",
        'kind = "pinned"',
        'kind = "pageable"',
        ("tests/test_ledger.py",),
    ),
    Mutation(
        "prefix-mask-range-end",
        "prefix-LM mask: an image range's last key left out of the bidirectional block",
        "mask |= (s <= q) & (q <= e) & (s <= k) & (k <= e)",
        "mask |= (s <= q) & (q <= e) & (s <= k) & (k < e)",
        ("tests/test_prefix_mask.py",),
    ),
    Mutation(
        "flex-mask-mod-int-index",
        "FlexAttention mask_mod indexes kv_lens with a Python int (breaks under vmap)",
        "(kv_idx < kv_lens[b])",
        "(kv_idx < kv_lens[int(b)])",
        ("tests/test_prefix_mask.py",),
    ),
    Mutation(
        "range-builder-window-off-by-one",
        "range builder: a range exactly one token longer than the sliding window is kept",
        "if window is not None and not clamp and end - start + 1 > window:",
        "if window is not None and not clamp and end - start > window:",
        ("tests/test_range_builders.py",),
    ),
    Mutation(
        "whatif-scale-ignored",
        "whatif replay: scaled host segments keep their measured length",
        "v[k] = v[k - 1] + scale[k - 1] * (b[k] - b[k - 1])",
        "v[k] = v[k - 1] + (b[k] - b[k - 1])",
        ("tests/test_whatif.py",),
    ),
    Mutation(
        "profile-fit-base-without-kv",
        "device-profile fit: ops without a kv term get base_ns = 0",
        'fields["base_ns"] = max(0.0, fields["base_ns"])',
        'fields["base_ns"] = max(0.0, fields["base_ns"]) if "per_kv_token_ns" in fields else 0.0',
        ("tests/test_sim_device.py",),
    ),
    Mutation(
        "census-encoder-counted-twice",
        "step census: the encoder, timed inside the input-preparation span, left in prepare_inputs too",
        'prepare_inputs=g("input_prep", 0.0) - g("encoder", 0.0))',
        'prepare_inputs=g("input_prep", 0.0))',
        ("tests/test_vllm_step.py",),
    ),
    Mutation(
        "census-phase-left-out",
        "step census: sample left out of the top-level phases (its time counted as glue)",
        'TOP = ("schedule", "prepare_inputs", "encoder", "forward", "sample", "update_from_output", "process_outputs")',
        'TOP = ("schedule", "prepare_inputs", "encoder", "forward", "update_from_output", "process_outputs")',
        ("tests/test_vllm_step.py",),
    ),
    Mutation(
        "census-span-nested-twice",
        "wrapper timers: an input-preparation span nested in another counted again",
        "if timers._depth.get(phase, 0):  # nested in a span of the same phase: already timed",
        "if False:  # nested in a span of the same phase: already timed",
        ("tests/test_vllm_step.py",),
    ),
    Mutation(
        "trace-encoder-counted-twice",
        "engine phase table: the trace's encoder left inside prepare_inputs as well",
        'row["prepare_inputs_us"] = row["input_prep_us"] - row["encoder_us"]',
        'row["prepare_inputs_us"] = row["input_prep_us"]',
        ("tests/test_trace_engine_steps.py",),
    ),
    Mutation(
        "census-share-above-one-passes",
        "census checks: a step whose named phases exceed it passes (5% allowed above the step)",
        "all(x <= 1 + SHARE_SLACK for _, x in above)",
        "all(x <= 1.05 for _, x in above)",
        ("tests/test_vllm_step.py",),
    ),
    Mutation(
        "census-phase-left-out-passes",
        "census checks: a step whose sum leaves a top-level phase out passes (the summed phases not compared)",
        "missing = [p for p in TOP_PHASES if summed is not None and p not in summed]",
        "missing = []",
        ("tests/test_vllm_step.py",),
    ),
    Mutation(
        "census-bracket-widened",
        "census checks: schedule() in the step held to the scheduler alone's bracket widened by 20%",
        '"passed": lo <= x <= hi',
        '"passed": 0.8 * lo <= x <= 1.2 * hi',
        ("tests/test_vllm_step.py",),
    ),
    Mutation(
        "variant-merged-tensor-cumsum",
        "A/B variants: merged runs the pre-#40143 tensor cumsum",
        'Variant("merged", "list", "per_step"',
        'Variant("merged", "tensor", "per_step"',
        ("tests/test_vllm_ab.py",),
    ),
    Mutation(
        "variant-pr40143-window",
        "A/B switch: vLLM 0.20's loop applied only with the tensor cumsum (pr40143 runs the installed window)",
        'if variant.scheduler == "loop":',
        'if variant.scheduler == "loop" and variant.placeholder == "tensor":',
        ("tests/test_vllm_ab.py",),
    ),
    Mutation(
        "sched020-first-image-skipped",
        "vLLM 0.20's loop: the walk starts at the second image (the first is never read or scheduled)",
        "for i, feat in enumerate(feats):",
        "for i, feat in enumerate(feats[1:], start=1):",
        ("tests/test_vllm_ab.py",),
    ),
    Mutation(
        "sched020-in-kv-cache-off-by-one",
        "vLLM 0.20's loop: an image whose last token is the last computed one counted as not yet in the KV cache",
        "if start + length <= num_computed_tokens:",
        "if start + length < num_computed_tokens:",
        ("tests/test_vllm_ab.py",),
    ),
    Mutation(
        "whatif-suggest-ranks-by-count",
        "whatif --suggest: host spans ranked by how many there are, not by the idle (or between-step) time",
        "_span_groups(g.rec, idle, step_rx, launching, step_spans).items(), key=lambda kv: -kv[1][1])",
        "_span_groups(g.rec, idle, step_rx, launching, step_spans).items(), key=lambda kv: -kv[1][0])",
        ("tests/test_whatif_hostonly.py",),
    ),
    Mutation(
        "whatif-host-only-keeps-reads",
        "whatif host-only prediction: the placeholder reads it removes stay in the replay",
        "changes = [reads.change]",
        "changes = []",
        ("tests/test_whatif_hostonly.py",),
    ),
    Mutation(
        "step-model-async-adds",
        "the one step model: under async scheduling host and device add up instead of overlapping",
        'overlapped = max(device_ns, host_ns) if regime == "async" else device_ns + host_ns',
        'overlapped = device_ns + host_ns if regime == "async" else max(device_ns, host_ns)',
        ("tests/test_step_model.py",),
    ),
    Mutation(
        "step-model-sync-plans-ahead",
        "the one step model: the mini engine plans a step ahead under sync scheduling too",
        'return 1 if regime == "async" else 0',
        "return 1",
        ("tests/test_step_model.py",),
    ),
    Mutation(
        "device-part-counted-twice",
        "device model: the first part (the decoder's GEMMs) charged twice in the step's total",
        "return sum(p.time_ns for p in self.parts) + self.floor_ns",
        "return sum(p.time_ns for p in self.parts) + self.parts[0].time_ns + self.floor_ns",
        ("tests/test_serve_device_model.py",),
    ),
    Mutation(
        "device-kv-shared-not-reread",
        "device model: a KV-shared layer's read of its owner's cache not counted (only owners read)",
        "dec_kv = g.reading_layers * dec_keys * kv_tok",
        "dec_kv = g.owning_layers * dec_keys * kv_tok",
        ("tests/test_serve_device_model.py",),
    ),
    Mutation(
        "host-loops-priced-as-reads",
        "CPU-speed mapping: the baseline's Python-loop part counted in tensor-read units",
        "reads, loops = max(0.0, excess) / units.read_ns, core[REFERENCE] / units.loop_ns",
        "reads, loops = max(0.0, excess) / units.read_ns, core[REFERENCE] / units.read_ns",
        ("tests/test_serve_host.py",),
    ),
    Mutation(
        "host-one-points-unit-costs",
        "CPU-speed mapping: every census point divided by the 128 x 32 point's unit costs, not its own run's",
        'units = UnitCosts.from_rows(in_run.get(f"{n}x{images}"), f"the census\'s unit costs at {n}x{images}")',
        'units = UnitCosts.from_rows(in_run.get(f"128x{images}"), f"the census\'s unit costs at {n}x{images}")',
        ("tests/test_serve_host.py",),
    ),
    Mutation(
        "peak-non-overlap-dropped",
        "the full-batch peaks leave out the step model's measured non-overlapping term",
        "for regime, step in both_regimes(device_ns, host_ns, non_overlap).items():",
        "for regime, step in both_regimes(device_ns, host_ns).items():",
        ("tests/test_serve_cli.py",),
    ),
    Mutation(
        "peak-host-async-less-device",
        "the PR host at the baseline's peak, async, inferred as step - device (the sync solution)",
        'host = step_ns - non_overlap - (device_ns if regime == "sync" else 0.0)',
        "host = step_ns - non_overlap - device_ns",
        ("tests/test_serve_check.py", "tests/test_serve_cli.py"),
    ),
)


class MutationError(Exception):
    """The check cannot be run as asked (a mutation that does not apply, a missing test, a failing baseline)."""


@dataclass
class Outcome:
    mutation: Mutation
    path: str  # the file it was planted in, relative to the tree
    caught: bool
    seconds: float
    detail: str  # the first failing test, or the end of pytest's output


# -- the tree --------------------------------------------------------------------------------

def tree_files(root: Path) -> list[Path]:
    """The files of ``root`` to copy, relative: git's tracked and untracked-but-not-ignored files, or
    (without git) every file outside ``SKIP_DIRS``."""
    try:
        proc = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                              capture_output=True, timeout=60, check=False)
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        proc = top = None
    if proc is not None and proc.returncode == 0 and top.returncode == 0 \
            and Path(top.stdout.strip()).resolve() == root.resolve():
        names = [Path(n) for n in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
        return [n for n in names if (root / n).is_file()]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        out.extend(Path(dirpath, f).relative_to(root) for f in filenames if not f.endswith(".pyc"))
    return out


def copy_tree(root: Path, dest: Path) -> Path:
    """A copy of ``root``'s files in ``dest/<root name>``, beside a link to ``root``'s sibling
    ``shared/`` (the real traces some tests read) where there is one."""
    tree = dest / root.name
    for rel in tree_files(root):
        target = tree / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    shared = root.parent / "shared"
    if shared.is_dir():
        (dest / "shared").symlink_to(shared, target_is_directory=True)
    return tree


def locate(tree: Path, mutation: Mutation) -> Path:
    """The one module under ``tree/labkit`` holding ``mutation.old`` exactly once; MutationError otherwise."""
    hits = []
    for path in sorted((tree / PACKAGE).rglob("*.py")):
        n = path.read_text(encoding="utf-8").count(mutation.old)
        if n:
            hits.append((path, n))
    if len(hits) != 1 or hits[0][1] != 1:
        where = ", ".join(f"{p.relative_to(tree)} ({n}x)" for p, n in hits) or "nowhere"
        raise MutationError(f"mutation {mutation.name!r} does not apply: its snippet {mutation.old!r} must occur "
                            f"exactly once under {PACKAGE}/, found {where}")
    return hits[0][0]


def mutated_source(path: Path, mutation: Mutation) -> str:
    """The module's text with the mutation applied; MutationError if the result does not compile."""
    source = path.read_text(encoding="utf-8")
    text = source.replace(mutation.old, mutation.new, 1)
    try:
        compile(text, str(path), "exec")
    except SyntaxError as exc:
        raise MutationError(f"mutation {mutation.name!r} does not compile: {exc}") from None
    return text


# -- running the tests -------------------------------------------------------------------------

def _env(tree: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutated module is never served from a stale .pyc
    env["PYTHONHASHSEED"] = "0"
    env.pop("LABKIT_RESULTS", None)
    env.pop("LABKIT_DATA", None)
    return env


def check_imports_from(tree: Path) -> None:
    """Make sure the copy's labkit is the one imported (not an installed or editable one elsewhere)."""
    proc = subprocess.run([sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"], cwd=tree,
                          env=_env(tree), capture_output=True, text=True, timeout=120, check=False)
    got = Path(proc.stdout.strip() or "?").resolve()
    if proc.returncode != 0 or tree.resolve() not in got.parents:
        raise MutationError(f"the copy's {PACKAGE} is not the one imported ({got}): {proc.stderr.strip()[-300:]}")


def run_tests(tree: Path, tests: tuple[str, ...], *, first_failure: bool) -> tuple[int | None, float, str]:
    """``(pytest exit status or None when it hung, seconds, detail)`` for ``tests`` in ``tree``."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist",
           "--no-header", "-rfE", *(["-x"] if first_failure else []), *tests]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0, f"no result within {RUN_TIMEOUT_S} s"
    seconds = time.perf_counter() - t0
    out = proc.stdout + proc.stderr
    failed = [ln for ln in out.splitlines() if re.match(r"(FAILED|ERROR) ", ln)]
    detail = failed[0] if failed else (out.strip().splitlines() or [""])[-1]
    return proc.returncode, seconds, detail


def failed_test(detail: str) -> str | None:
    """The test id of a ``FAILED <id> - <message>`` / ``ERROR <id>`` line, else None."""
    m = re.match(r"(?:FAILED|ERROR) (.+?)(?: - .*)?$", detail)
    return m.group(1) if m else None


def check(root: Path, mutations, *, log=print) -> list[Outcome]:
    """Run every mutation in a temporary copy of ``root``; MutationError when the check cannot run."""
    mutations = list(mutations)
    if not mutations:
        raise MutationError("no mutations selected")
    if not (root / PACKAGE).is_dir():
        raise MutationError(f"no {PACKAGE}/ package under {root}")
    with tempfile.TemporaryDirectory(prefix="labkit-mutation-") as tmp:
        tree = copy_tree(root, Path(tmp))
        targets = [locate(tree, m) for m in mutations]  # every mutation must apply before anything runs
        for m in mutations:
            absent = [t for t in m.tests if not (tree / t.split("::")[0]).is_file()]
            if absent:
                raise MutationError(f"mutation {m.name!r}: no test file {', '.join(absent)}")
        for m, path in zip(mutations, targets):
            mutated_source(path, m)
        check_imports_from(tree)
        outcomes = []
        for m, path in zip(mutations, targets):
            original = path.read_text(encoding="utf-8")
            path.write_text(mutated_source(path, m), encoding="utf-8")
            try:
                rc, seconds, detail = run_tests(tree, m.tests, first_failure=True)
            finally:
                path.write_text(original, encoding="utf-8")
            if rc in (4, 5):  # pytest: usage error, nothing collected
                raise MutationError(f"mutation {m.name!r}: pytest could not run {' '.join(m.tests)}: {detail}")
            outcome = Outcome(m, str(path.relative_to(tree)), rc != 0, seconds, detail)
            log(f"{'caught  ' if outcome.caught else 'SURVIVED'} {m.name} ({outcome.path}, {seconds:.1f} s): "
                f"{detail if outcome.caught else m.what}")
            outcomes.append(outcome)
        # the tests that caught a mutation (a hang or crash: all of its files) must pass without it
        confirm = tuple(dict.fromkeys(t for o in outcomes if o.caught
                                      for t in ([failed_test(o.detail)] if failed_test(o.detail) else o.mutation.tests)))
        if confirm:
            rc, seconds, detail = run_tests(tree, confirm, first_failure=False)
            log(f"unmutated: the {len(confirm)} catching tests {'pass' if rc == 0 else 'FAIL'} ({seconds:.1f} s)")
            if rc != 0:
                raise MutationError(f"the tests fail without any mutation (exit {rc}), so they prove nothing: {detail}")
        return outcomes


def main(argv: list[str] | None = None, mutations=MUTATIONS) -> int:
    parser = argparse.ArgumentParser(description="Plant known bugs in labkit one at a time; the tests must catch each.")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutations")
    parser.add_argument("--root", type=Path, default=REPO, help="the tree to copy (default: this repository)")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in mutations}
    unknown = [n for n in args.only or () if n not in by_name]
    if unknown:
        print(f"mutation_check: unknown mutation {', '.join(unknown)} (--list shows them)", file=sys.stderr)
        return 2
    chosen = [by_name[n] for n in args.only] if args.only else list(mutations)
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.what}\n    {m.old!r} -> {m.new!r}\n    caught by {' '.join(m.tests)}")
        return 0
    t0 = time.perf_counter()
    try:
        outcomes = check(args.root.resolve(), chosen, log=lambda s: print(s, flush=True))
    except MutationError as exc:
        print(f"mutation_check: {exc}", file=sys.stderr)
        return 2
    survived = [o.mutation.name for o in outcomes if not o.caught]
    print(f"{len(outcomes) - len(survived)} of {len(outcomes)} mutations caught in {time.perf_counter() - t0:.0f} s"
          + (f"; survived: {', '.join(survived)}" if survived else ""))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
