"""The package's house rules: a layout a newcomer can walk.

Packages import one way, down the order of ``LAYERS`` (docs/layout.md writes it out), and no
import circle among labkit's modules (imports at any depth, function-level ones too), no folder
with more than ``MAX_FILES`` modules side by side, no module over ``MAX_LINES`` lines, a docstring in
every package's ``__init__.py``, and the entry points named from outside the package still resolve.
The import graph is read from the sources (``ast``), nothing is imported for it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "labkit"
#: most ``.py`` files (``__init__.py`` included) one folder may hold
MAX_FILES = 14
#: most lines one module may have
MAX_LINES = 500
#: fewest lines a module may have (a splinter is merged, not kept to meet the caps), but these
MIN_LINES, SMALL_ALLOWED = 30, ("__init__.py", "__main__.py", "errors.py")
#: the calls that take a result name: a constant of ``labkit.results`` (NAMES), never a string typed there
NAME_TAKERS = ("find", "find_all", "make_result", "sized_name", "reuse_or_measure")
#: labkit's top-level modules and packages, bottom to top: each imports only from its own layer and below
LAYERS = (
    ("errors", "fileio", "device", "timing", "machine_load", "results", "facts", "step_model", "bench"),
    ("trace",), ("mm",), ("attn",), ("engine",), ("gpu",), ("vllm",), ("serve",), ("viz",), ("report",),
    ("widgets",),
    ("calibrate", "results_cli", "cli", "__main__"),
)


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module under labkit/ (a package by its ``__init__.py``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node: ast.Import | ast.ImportFrom, name: str, is_package: bool, modules: dict) -> list[str]:
    """The labkit modules one import statement of module ``name`` names (absolute or relative)."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = name.split(".") if is_package else name.split(".")[:-1]
            parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        # ``from pkg import mod`` names the module; ``from mod import obj`` names ``mod``
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    out = []
    for target in targets:
        while target and target not in modules:  # ``import a.b.obj``-style names: the module that exists
            target = target.rpartition(".")[0]
        if target.startswith("labkit"):
            out.append(target)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the labkit modules it imports anywhere in its source, less its own ancestor packages
    (a module importing the package it lives in runs that ``__init__`` first anyway: no edge back)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(_imported(node, name, path.name == "__init__.py", modules))
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (``[a, b, ..., a]``), or None when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_the_cycle_finder_finds_a_circle_and_skips_ancestor_packages():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    modules = {"labkit.p": None, "labkit.p.m": None}
    tree = ast.parse("from labkit.p import x\nfrom . import m\n")
    assert _imported(tree.body[0], "labkit.p.m", False, modules) == ["labkit.p"]
    assert _imported(tree.body[1], "labkit.p", True, modules) == ["labkit.p.m"]


def test_no_import_circle():
    graph = import_graph()
    assert len(graph) > 100  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def _layer(module: str) -> int:
    """The layer of ``labkit.<top>...``: the index in :data:`LAYERS` of its top-level name."""
    top = module.split(".")[1] if "." in module else "__init__"
    return next((i for i, names in enumerate(LAYERS) if top in names), -1)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import of a module whose layer is above the importer's."""
    return [f"{m} -> {t}" for m, targets in sorted(graph.items()) for t in sorted(targets)
            if _layer(t) > _layer(m)]


def test_the_layer_check_names_an_upward_edge_and_lets_downward_and_sideways_ones_be():
    graph = {"labkit.viz.a": {"labkit.serve.b", "labkit.viz.c", "labkit.errors"},
             "labkit.facts": {"labkit.errors"}, "labkit.results": {"labkit.viz.a"},
             "labkit.trace.x": {"labkit.engine.y"}}
    assert upward_imports(graph) == ["labkit.results -> labkit.viz.a", "labkit.trace.x -> labkit.engine.y"]


def test_every_top_level_module_and_package_has_a_layer():
    tops = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    tops |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    unplaced = sorted(t for t in tops if _layer(f"labkit.{t}") < 0)
    assert not unplaced, f"top-level modules with no place in LAYERS: {unplaced}"


def test_packages_import_only_down_the_layers():
    upward = upward_imports(import_graph())
    assert not upward, "imports of a layer above the importer's:\n" + "\n".join(upward)


def test_no_folder_holds_more_than_max_files_modules():
    folders = {p.parent for p in PACKAGE.rglob("*.py")}
    crowded = {str(f.relative_to(REPO)): n for f in folders if (n := len(list(f.glob("*.py")))) > MAX_FILES}
    assert not crowded, f"more than {MAX_FILES} .py files in one folder: {crowded}"


def test_no_module_over_max_lines():
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_module_under_min_lines():
    short = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py") if p.name not in SMALL_ALLOWED
             and (n := len(p.read_text(encoding="utf-8").splitlines())) < MIN_LINES}
    assert not short, f"modules under {MIN_LINES} lines (merge them into a neighbour): {short}"


def _python_sources():
    yield from PACKAGE.rglob("*.py")
    yield from (REPO / "notebooks").glob("*.py")


def test_result_names_are_the_constants_and_no_loader_is_named_recorded():
    typed, loaders = [], []
    for path in _python_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("recorded_"):
                loaders.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
            if not isinstance(node, ast.Call) or not node.args:
                continue
            f = node.func  # the imported function, or ``results.find`` / ``store.find`` (not ``str.find``)
            func = f.id if isinstance(f, ast.Name) else f.attr if (
                isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("results", "store")) else ""
            first = node.args[0]
            names = first.elts if isinstance(first, (ast.List, ast.Tuple)) else [first]
            if func in NAME_TAKERS and any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in names):
                typed.append(f"{path.relative_to(REPO)}:{node.lineno} {func}({ast.unparse(first)})")
    assert not loaders, f"results are found with labkit.results.find / find_all, not a loader of their own: {loaders}"
    assert not typed, f"result names typed where labkit.results has a constant for them: {typed}"


def test_every_package_has_an_init_with_a_docstring():
    folders = {p.parent for p in PACKAGE.rglob("*.py")}
    assert PACKAGE in folders
    missing = [str(f.relative_to(REPO)) for f in sorted(folders) if not (f / "__init__.py").is_file()]
    assert not missing, f"folders with modules but no __init__.py: {missing}"
    bare = [str(f.relative_to(REPO)) for f in sorted(folders)
            if not (ast.get_docstring(ast.parse((f / "__init__.py").read_text(encoding="utf-8"))) or "").strip()]
    assert not bare, f"__init__.py without a docstring: {bare}"


def _entry_points() -> dict[str, str]:
    """``name -> module:attr`` of pyproject.toml's scripts and entry points."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    return dict(re.findall(r'^(\w+) = "(labkit[\w.]*:\w+)"$', text, flags=re.M))


def _resolve(spec: str):
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def test_the_vllm_plugin_entry_point_resolves():
    # vLLM loads ``labkit.vllm.ab:load_plugin`` in every process it starts; the module imports without vLLM
    assert _entry_points()["labkit_vllm_ab"] == "labkit.vllm.ab:load_plugin"
    assert callable(_resolve("labkit.vllm.ab:load_plugin"))
    assert Path(sys.modules["labkit.vllm.ab"].__file__).resolve() == PACKAGE / "vllm" / "ab.py"


def test_the_other_entry_points_and_every_verb_module_resolve():
    points = _entry_points()
    assert points["labkit"] == "labkit.cli:main"
    assert callable(_resolve(points["labkit"]))
    if importlib.util.find_spec("nbconvert") is not None:
        assert _resolve(points["labkit_html"]).__name__ == "LabkitHTMLExporter"
    from labkit.cli import BENCH_TARGETS, VERBS

    modules = [m for m, _help in [*VERBS.values(), *BENCH_TARGETS.values()] if m is not None]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    assert not missing, f"verb modules that do not exist: {missing}"
    # every verb: a parser-builder and a main(args), vLLM's benchmark pattern
    for m in modules:
        mod = importlib.import_module(m)
        assert callable(getattr(mod, "add_cli_args", None)) and callable(getattr(mod, "main", None)), m


def test_modules_named_from_outside_the_package_stay_put():
    # the ``.pth`` hook scripts/setup_vllm_cpu.sh writes names this path
    assert importlib.util.find_spec("labkit.vllm.torchvision_compat") is not None


def test_the_package_imports_nothing_from_scripts():
    # scripts/ (CI tooling) imports labkit, never the other way round
    found = [f"{p.relative_to(REPO)}:{node.lineno}" for p in PACKAGE.rglob("*.py")
             for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "scripts" for a in node.names)
             or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "scripts"]
    assert not found, f"labkit modules importing scripts/: {found}"
