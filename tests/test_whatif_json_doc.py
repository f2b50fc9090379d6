"""The ``labkit whatif --json`` table of ``docs/analyze-json.md`` names every key the command writes.

Checked on the command's own outputs for a GPU trace with every kind of change and ``--suggest``
(the lab's per_layer H200 trace, trimmed) and a host-only one (vLLM's CPU baseline).
"""

import json
import re

import pytest
from real_traces import DATA
from test_trace_json_doc import doc_tables

from labkit.cli import main

SECTION = "`labkit whatif --json`"
#: values whose keys are data (the change patterns), not names
DATA_KEYED = {"labkit", "per_copy_host_us", "pad_host_us"}
RUNS = {
    "gpu": ["labkit-h200-fast-cursor-per_layer-async.trimmed.pt.trace.json.gz", "--suggest",
            "--drop-copies", r"^forward/layer_\d+$", "--unsync", "cudaMemcpyAsync", "--scale", "^schedule$=0.5"],
    "host-only": ["vllm-cpu-gemma4-baseline.trimmed.pt.trace.json.gz", "--suggest", "--scale", "get_num_embeds=0"],
}


def _keys(obj) -> set:
    """Every key at any depth of ``obj`` (not inside the data-keyed maps)."""
    todo, out = [obj], set()
    while todo:
        o = todo.pop()
        if isinstance(o, dict):
            out |= set(o)
            todo += [v for k, v in o.items() if k not in DATA_KEYED]
        elif isinstance(o, list):
            todo += o
    return out


@pytest.mark.parametrize("run", sorted(RUNS))
def test_whatif_json_keys_are_documented(tmp_path, capsys, run):
    name, *args = RUNS[run]
    out = tmp_path / "w.json"
    assert main(["whatif", str(DATA / name), *args, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    table = doc_tables()[SECTION]
    assert set(doc) == set(table), (sorted(doc), sorted(table))
    for key, text in table.items():
        missing = _keys(doc[key]) - set(re.findall(r"`([A-Za-z_0-9]+)`", text))
        assert not missing, f"{run}: {key!r} writes {sorted(missing)}, not on the page"
    if run == "gpu":
        assert doc["suggestions"]["copies"] and doc["assumptions"]["pad_host_us"]
    else:
        assert doc["suggestions"]["reads"] and doc["source"]["kind"] == "host-only"
