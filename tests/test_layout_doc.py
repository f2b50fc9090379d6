"""docs/layout.md against the package and the parser: every folder and top-level module it lists
exists and every one that exists is listed; the order of the packages is tests/test_house.py's; every verb and bench target is named; the caps it states
are the ones tests/test_house.py holds."""

from __future__ import annotations

import re
from pathlib import Path

from test_house import LAYERS, MAX_FILES, MAX_LINES, MIN_LINES, SMALL_ALLOWED

from labkit import cli
from labkit.vllm.conformance.cli import add_cli_args as vllm_cli_args

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "layout.md").read_text(encoding="utf-8")


def _layout_block() -> str:
    return DOC.split("```", 2)[1]


def test_the_layout_lists_every_top_level_module_and_folder_and_nothing_else():
    listed = set(re.findall(r"^  ([a-z_]+(?:\.py|/))", _layout_block(), re.M))
    present = {p.name + "/" for p in (REPO / "labkit").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    present |= {p.name for p in (REPO / "labkit").glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    assert listed == present, f"docs/layout.md lists {sorted(listed - present)} (gone), misses {sorted(present - listed)}"


def test_every_verb_and_bench_target_is_named():
    import argparse

    text = " ".join(DOC.split())
    for verb in cli.VERBS:
        assert f"`labkit {verb}" in text, verb
    for target in cli.BENCH_TARGETS:
        assert f"`{target}`" in text, target
    p = argparse.ArgumentParser()
    vllm_cli_args(p)
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    missing = [c for c in sub.choices if f"`{c}`" not in text]
    assert not missing, f"docs/layout.md does not name labkit vllm's commands {missing}"


def test_the_caps_it_states_are_the_house_rules():
    text = " ".join(DOC.split())
    assert f"more than {MAX_FILES} modules" in text and f"over {MAX_LINES} lines" in text
    assert f"is under {MIN_LINES}" in text
    assert all(f"`{name}`" in text for name in SMALL_ALLOWED)


def test_the_order_it_writes_is_the_one_the_house_rules_hold():
    section = DOC.split("## The order of the packages", 1)[1].split("\n\n")[2]  # the numbered list
    named = list(dict.fromkeys(re.findall(r"`(\w+)`", section)))
    assert named == [name for layer in LAYERS for name in layer]
