"""environment.yml stays consistent with pyproject.toml (conda itself is not available here)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~\[;]", req.strip(), maxsplit=1)[0].lower()


def _load():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return env, project


def _pip_section(env) -> list[str]:
    pips = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pips) == 1, "exactly one pip section"
    return pips[0]


def test_python_version_satisfies_requires_python():
    env, project = _load()
    pythons = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert pythons == ["python=3.11"]
    minimum = re.match(r">=\s*(\d+)\.(\d+)", project["requires-python"])
    assert minimum, project["requires-python"]
    assert (3, 11) >= (int(minimum.group(1)), int(minimum.group(2)))
    assert "pip" in env["dependencies"]


def test_pip_section_installs_the_package_with_existing_extras():
    env, project = _load()
    editable = [p for p in _pip_section(env) if p.startswith("-e ")]
    assert len(editable) == 1
    m = re.fullmatch(r"-e \.\[([a-z0-9_,\- ]+)\]", editable[0])
    assert m, editable[0]
    extras = {e.strip() for e in m.group(1).split(",")}
    assert extras == {"notebook", "dev"}
    assert extras <= set(project["optional-dependencies"])


def test_core_dependencies_are_listed():
    env, project = _load()
    listed = {_name(p) for p in _pip_section(env) if not p.startswith("-")}
    core = {_name(d) for d in project["dependencies"]}
    assert core <= listed, core - listed
    # and with the same lower bounds
    pins = {_name(p): p.replace(" ", "") for p in _pip_section(env) if not p.startswith("-")}
    for dep in project["dependencies"]:
        assert pins[_name(dep)] == dep.replace(" ", "")


def test_environment_has_a_name_and_channels():
    env, _ = _load()
    assert env["name"] == "labkit"
    assert env["channels"]
