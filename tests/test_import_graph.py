"""No import cycles inside mixft/, late imports included; ``import mixft`` stays light.

A cycle held together by a function-level import still ties two modules into one: neither
can be read, tested or changed alone. The graph is built from the source with ``ast``
(every ``import`` and ``from ... import`` anywhere in a module, relative or absolute), so
an import hidden in a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mixft"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def internal_imports(path: Path, modules: set[str], package_dir: Path = PACKAGE) -> set[str]:
    """The mixft modules ``path`` imports, wherever in the file the import statement is."""
    name = module_name(path, package_dir)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from .pkg import mod` names the submodule (importing a submodule is not an
            # import of its package's code); `from .pkg import func` names the package.
            targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
        else:
            continue
        for target in targets:
            # The longest mixft module the dotted name starts with (a.b.func -> a.b).
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target != "mixft":
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): internal_imports(f, modules) for f in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None. Iterative DFS with white/grey/black marks."""
    colour = dict.fromkeys(graph, 0)
    for root in sorted(graph):
        if colour[root]:
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path = [root]
        colour[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour.get(child) == 1:
                return path[path.index(child):] + [child]
            elif colour.get(child) == 0:
                colour[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


def test_the_cycle_finder_finds_a_cycle_and_accepts_a_tree():
    # Guards the test below: a finder that never reports would pass any package.
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "mixft"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n    import mixft.c\n")
    (pkg / "d.py").write_text("from . import a\nfrom mixft.b import h\n")
    modules = {"mixft", "mixft.a", "mixft.b", "mixft.c", "mixft.d"}
    assert internal_imports(pkg / "a.py", modules, pkg) == {"mixft.b", "mixft.c"}
    assert internal_imports(pkg / "d.py", modules, pkg) == {"mixft.a", "mixft.b"}


def test_mixft_has_no_import_cycle():
    graph = import_graph()
    assert "mixft.trainer" in graph and graph["mixft.trainer"]  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in mixft/: " + " -> ".join(cycle)


def test_import_mixft_loads_neither_torch_nor_matplotlib():
    code = "import mixft, sys; assert 'matplotlib' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# The layers, lowest first (docs: DESIGN.md "Layout"): a module may import its own layer
# and the ones below, never one above. Checked for the layers whose borders issue 17 drew.
CORE = ("mixft.options", "mixft.config", "mixft.precision", "mixft.rng", "mixft.measure", "mixft.errors",
        "mixft.log", "mixft.atomic")
ABOVE_CORE = ("mixft.trainer", "mixft.checkpoint", "mixft.run", "mixft.cli")
# What may import the run layer: itself and the layers above it (reports, probe, CLI).
RUN_LAYER_USERS = ("mixft.run", "mixft.cli", "mixft.report", "mixft.plots", "mixft.aggregate", "mixft.probe",
                   "mixft.probe_result")


def _within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for child in graph.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def test_checkpoint_is_only_the_file_format():
    graph = import_graph()
    wrong = {m for m in graph["mixft.checkpoint"]
             if _within(m, ("mixft.config", "mixft.results", "mixft.interrupt", "mixft.run", "mixft.cli"))}
    assert not wrong, f"mixft.checkpoint imports run-level modules: {sorted(wrong)}"
    assert "mixft.trainer" in graph["mixft.checkpoint"]  # the walk saw its imports


def test_only_the_layers_above_import_the_run_layer():
    graph = import_graph()
    assert {"mixft.run.runner", "mixft.run.outdir", "mixft.run.identity", "mixft.run.build"} <= set(graph)
    importers = {m for m, deps in graph.items() if any(_within(d, ("mixft.run",)) for d in deps)}
    assert "mixft.cli" in importers  # the check sees the run layer's users
    wrong = {m for m in importers if not _within(m, RUN_LAYER_USERS)}
    assert not wrong, f"below the run layer, yet importing it: {sorted(wrong)}"


def test_core_modules_import_nothing_above_the_core():
    graph = import_graph()
    for module in CORE:
        assert module in graph, module
        wrong = {m for m in _reaches(graph, module) if _within(m, ABOVE_CORE)}
        assert not wrong, f"{module} reaches {sorted(wrong)}"


def test_the_layer_checks_catch_a_violation():
    # Guards the three tests above: the helpers do see an upward edge, direct or through another module.
    graph = {"mixft.config": {"mixft.errors"}, "mixft.errors": {"mixft.run.outdir"}, "mixft.run.outdir": set()}
    assert _within("mixft.run.outdir", ABOVE_CORE) and "mixft.run.outdir" in _reaches(graph, "mixft.config")
    assert not _within("mixft.runner_like", ("mixft.run",))
