"""``docs/analyze-json.md`` names every key ``labkit analyze --json`` writes: checked on real outputs.

The page has one table per document (one trace, several traces' ``combined``, ``--vs``'s
``diff``): a row per top-level key, whose text names (in backticks) every key found below it.
The outputs come from the command itself on fixtures that between them have CUDA graphs, vLLM
steps and phases, small pageable copies with flags, several streams and a rank.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from labkit.cli import main as labkit_main

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "analyze-json.md"
DATA = REPO / "tests" / "data"
TRACES = ["nvllm-gb10-one-step.trimmed.pt.trace.json.gz",  # CUDA graphs, vLLM steps and phases
          "labkit-h200-fast-cursor-per_layer-async.trimmed.pt.trace.json.gz",  # flagged pageable copies
          "hta-trace-diff-control-a100-rank3.last-step-start.pt.trace.json.gz",  # three streams, a rank
          "hta-step-based-gpu-annotation-gp100.pt.trace.json.gz"]  # ProfilerStep, pageable copies
#: values whose keys are data, not names (the page says so): their keys are not looked up
DATA_KEYED = {"skip_reasons", "labkit"}


def doc_tables() -> dict[str, dict[str, str]]:
    """``{section title: {key: row text}}`` of the page's tables."""
    out: dict = {}
    section = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        m = re.match(r"\| `([a-z_0-9]+)` \| (.*) \|$", line)
        if m:
            out.setdefault(section, {})[m.group(1)] = m.group(2)
    return out


def nested_keys(obj) -> set[str]:
    out: set = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(k)
            if k not in DATA_KEYED:
                out |= nested_keys(v)
    elif isinstance(obj, list):
        for v in obj:
            out |= nested_keys(v)
    return out


def check_against(table: dict[str, str], document: dict, what: str) -> None:
    assert set(document) == set(table), f"{what}: written {sorted(document)}, documented {sorted(table)}"
    for key, text in table.items():
        named = set(re.findall(r"`([A-Za-z_0-9]+)`", text))
        missing = nested_keys(document[key]) - named
        assert not missing, f"{what}: {key!r} writes {sorted(missing)}, not on the page"


def analyze_json(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "out.json"
    assert labkit_main(["analyze", *args, "--json", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def tables():
    t = doc_tables()
    assert {"One trace", "Several traces", "Two traces (`--vs OTHER`)"} <= set(t), sorted(t)
    return t


@pytest.mark.parametrize("name", TRACES)
def test_one_trace_keys_are_documented(tables, tmp_path, capsys, name):
    check_against(tables["One trace"], analyze_json(tmp_path, str(DATA / name)), name)
    capsys.readouterr()


def test_several_traces_keys_are_documented(tables, tmp_path, capsys):
    folder = tmp_path / "ranks"
    folder.mkdir()
    for name in TRACES[1:]:
        shutil.copy(DATA / name, folder / name)
    doc = analyze_json(tmp_path, str(folder), "--jobs", "1")
    capsys.readouterr()
    assert set(doc) == {"traces", "combined"}
    text = DOC.read_text()
    assert "`traces`" in text and "`combined`" in text and "plus `trace` (its path)" in text
    for entry in doc["traces"]:
        check_against(tables["One trace"], {k: v for k, v in entry.items() if k != "trace"}, entry["trace"])
    assert doc["combined"]["per_step"] and doc["combined"]["per_rank"]  # the rows the page describes are there
    check_against(tables["Several traces"], doc["combined"], "combined")


def test_vs_keys_are_documented(tables, tmp_path, capsys):
    doc = analyze_json(tmp_path, str(DATA / TRACES[1]), "--vs", str(DATA / TRACES[3]))
    capsys.readouterr()
    assert set(doc) == {"before", "after", "diff"}
    diff_table = dict(tables["Two traces (`--vs OTHER`)"])
    for side in ("before", "after"):
        check_against(tables["One trace"], doc[side], side)
        # the diff's before/after are the two traces' sources: the page points to the source row
        assert "`source`" in diff_table[side]
        diff_table[side] = tables["One trace"]["source"]
    check_against(diff_table, doc["diff"], "diff")


def test_an_undocumented_key_fails_the_check(tables):
    """The check itself: a key the page does not name is reported, at the top and deep inside."""
    with pytest.raises(AssertionError, match="written"):
        check_against(tables["One trace"], {**{k: {} for k in tables["One trace"]}, "extra": 1}, "planted")
    deep = {k: {} for k in tables["One trace"]}
    deep["graphs"] = {"replays": [{"replay": 0, "not_on_the_page_us": 1.0}]}
    with pytest.raises(AssertionError, match="not_on_the_page_us"):
        check_against(tables["One trace"], deep, "planted")
