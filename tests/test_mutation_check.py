"""scripts/mutation_check.py's own machinery, on a tiny tree: caught, survived, not applicable, bad baseline.

The whole check (every planted bug against the lab's tests) runs as ``make mutation-check``; here
only that each of its mutations still applies to this tree, exactly once, and compiles.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("mutation_check", REPO / "scripts" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


mc = _load()

CORE = '''def add(a, b):
    return a + b


def double(x):
    return x * 2
'''


@pytest.fixture
def tiny(tmp_path):
    """A tree with a package named like the lab's and one test, which covers ``add`` but not ``double``."""
    root = tmp_path / "tiny"
    (root / mc.PACKAGE / "sub").mkdir(parents=True)
    (root / mc.PACKAGE / "__init__.py").write_text("")
    (root / mc.PACKAGE / "sub" / "__init__.py").write_text("")
    (root / mc.PACKAGE / "sub" / "core.py").write_text(CORE)
    (root / "tests").mkdir()
    (root / "tests" / "test_core.py").write_text(
        f"from {mc.PACKAGE}.sub.core import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    return root


CAUGHT = mc.Mutation("add-subtracts", "add subtracts", "return a + b", "return a - b", ("tests/test_core.py",))
SURVIVES = mc.Mutation("double-triples", "double triples", "return x * 2", "return x * 3", ("tests/test_core.py",))


def test_every_mutation_applies_once_to_this_tree_and_compiles():
    names = [m.name for m in mc.MUTATIONS]
    assert len(set(names)) == len(names) >= 5
    for m in mc.MUTATIONS:
        path = mc.locate(REPO, m)  # raises unless the snippet occurs exactly once under labkit/
        assert path.suffix == ".py" and m.old != m.new
        assert mc.mutated_source(path, m) != path.read_text(encoding="utf-8")
        for t in m.tests:
            assert (REPO / t.split("::")[0]).is_file(), (m.name, t)


def test_caught_and_surviving_mutations(tiny, capsys):
    before = (tiny / mc.PACKAGE / "sub" / "core.py").read_text()
    assert mc.main(["--root", str(tiny)], mutations=(CAUGHT,)) == 0
    out = capsys.readouterr().out
    assert "caught   add-subtracts (labkit/sub/core.py" in out and "test_core.py::test_add" in out
    assert "1 of 1 mutations caught" in out
    assert mc.main(["--root", str(tiny)], mutations=(CAUGHT, SURVIVES)) == 1
    out = capsys.readouterr().out
    assert "SURVIVED double-triples" in out and "survived: double-triples" in out
    assert (tiny / mc.PACKAGE / "sub" / "core.py").read_text() == before  # the tree itself is never written


@pytest.mark.parametrize("old,message", [
    ("return a * b", "found nowhere"),
    ("return ", "(2x)"),
])
def test_a_mutation_that_does_not_apply_is_an_error(tiny, capsys, old, message):
    bad = mc.Mutation("bad", "bad", old, "return 0", ("tests/test_core.py",))
    assert mc.main(["--root", str(tiny)], mutations=(CAUGHT, bad)) == 2
    out, err = capsys.readouterr()
    assert "mutation 'bad' does not apply" in err and message in err
    assert "unmutated" not in out  # nothing ran: every mutation is located first


def test_missing_tests_failing_baseline_and_bad_usage_are_errors(tiny, capsys):
    gone = mc.Mutation("gone", "gone", "return a + b", "return a - b", ("tests/test_gone.py",))
    assert mc.main(["--root", str(tiny)], mutations=(gone,)) == 2
    assert "no test file tests/test_gone.py" in capsys.readouterr().err
    broken = mc.Mutation("syntax", "syntax", "return a + b", "return a +", ("tests/test_core.py",))
    assert mc.main(["--root", str(tiny)], mutations=(broken,)) == 2
    assert "does not compile" in capsys.readouterr().err
    assert mc.main(["--root", str(tiny), "--only", "nope"], mutations=(CAUGHT,)) == 2
    assert "unknown mutation nope" in capsys.readouterr().err
    assert mc.main(["--root", str(tiny / "tests")], mutations=(CAUGHT,)) == 2
    assert f"no {mc.PACKAGE}/ package under" in capsys.readouterr().err
    (tiny / "tests" / "test_core.py").write_text(
        f"from {mc.PACKAGE}.sub.core import add\n\n\ndef test_add():\n    assert add(2, 3) == 6\n")
    assert mc.main(["--root", str(tiny)], mutations=(CAUGHT,)) == 2
    assert "the tests fail without any mutation" in capsys.readouterr().err
