"""``labkit analyze`` runs with only what pyproject's core ``dependencies`` declare (plus the stdlib).

A subprocess installs an import hook that refuses every top-level module which is neither in the
standard library nor shipped by a distribution in the transitive closure of labkit's declared
core dependencies; optional speed-ups (isal), plotly, dask and HTA are refused.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def _req_name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def core_closure() -> set[str]:
    """Distribution names: labkit's core dependencies and, recursively, theirs (extras left out)."""
    todo = [_req_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_req_name(r) for r in reqs if "extra ==" not in r and "extra==" not in r]
    return seen


def allowed_modules() -> list[str]:
    dists = core_closure()
    mods = {m for m, ds in metadata.packages_distributions().items()
            if any(d.lower().replace("_", "-") in dists for d in ds)}
    return sorted(mods | set(sys.stdlib_module_names) | {"labkit", "__main__"})


HOOK = r"""
import importlib.abc, json, sys
allowed = set(json.loads(sys.argv[1]))
refused = []
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in allowed or top.startswith("_"):
            return None
        refused.append(top)
        raise ModuleNotFoundError(f"No module named {name!r} (not a core dependency)", name=name)
sys.meta_path.insert(0, Refuse())
from labkit.cli import main
rc = main(sys.argv[2:])
sys.stderr.write("REFUSED " + json.dumps(sorted(set(refused))) + "\n")
sys.exit(rc)
"""


def test_analyze_runs_with_core_dependencies_only(tmp_path):
    allowed = allowed_modules()
    assert "pandas" in allowed and "numpy" in allowed and "msgspec" not in allowed and "plotly" not in allowed
    out = tmp_path / "a.json"
    traces = [DATA / "hta-step-based-gpu-annotation-gp100.pt.trace.json.gz", DATA / "hta-triton-example-a100.pt.trace.json.gz"]
    p = subprocess.run([sys.executable, "-c", HOOK, json.dumps(allowed), "analyze", *map(str, traces),
                        "--jobs", "1", "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    refused = json.loads(p.stderr.strip().splitlines()[-1].removeprefix("REFUSED "))
    assert "isal" in refused  # the optional inflate was really kept out
    doc = json.loads(out.read_text())
    assert doc["traces"][0]["h2d"]["pageable_count"] == 10 and len(doc["traces"]) == 2
