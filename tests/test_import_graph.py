"""The layers are the folders: imports only go down, no cycles (late imports included), ``import mixft`` stays light.

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
                return path[path.index(child) :] + [child]
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
    assert "mixft.train.trainer" in graph and graph["mixft.train.trainer"]  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in mixft/: " + " -> ".join(cycle)


def test_import_mixft_loads_neither_torch_nor_matplotlib():
    code = (
        "import mixft, sys; assert 'matplotlib' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_cli_answers_help_and_a_bad_option_without_loading_torch():
    # torch takes seconds to load: `mixft --help` and a mistyped option must not wait for it.
    code = (
        "import contextlib, io, sys\n"
        "from mixft.cli.main import build_parser, main\n"
        "build_parser().format_help()\n"
        "with contextlib.redirect_stderr(io.StringIO()) as err:\n"
        "    assert main(['--recipe', 'bert-sst2', '--lr', '-1', '--output-dir', 'never']) == 2\n"
        "assert '--lr' in err.getvalue(), err.getvalue()\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('mixft'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# The layers, lowest first (docs/architecture.md): a module imports modules of its own layer and
# of the layers below, never one above. A layer is a folder of mixft/; the ground is mixft/'s
# top-level modules. models/, data/ and metrics/ sit on one floor above amp/, ordered by the
# two imports between them today: data/hubdata asks models/hub whether the hub is reachable,
# metrics/task reads data/'s task kinds; models/ imports neither.
LAYERS = ("ground", "amp", "models", "data", "metrics", "train", "callbacks", "config", "report", "runs", "cli")
APPLICATIONS = ("recipes", "scripts", "benchmarks", "examples", "tests")


def layer_of(module: str) -> str:
    """``mixft.train.trainer`` -> ``train``; ``mixft.errors`` (or ``mixft``) -> ``ground``."""
    parts = module.split(".")
    if len(parts) >= 2 and (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return "ground"


def layer_violations(graph: dict[str, set[str]], layers=LAYERS, layer=layer_of) -> list[str]:
    """Every import that climbs: ``a -> b`` where b's layer is above a's (or not in the table)."""
    rank = {name: i for i, name in enumerate(layers)}
    wrong = []
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            here, there = layer(module), layer(dep)
            if here not in rank or there not in rank or rank[there] > rank[here]:
                wrong.append(f"{module} ({here}) -> {dep} ({there})")
    return wrong


def test_every_folder_of_mixft_is_in_the_layer_table():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == set(LAYERS) - {"ground"}, sorted(folders ^ (set(LAYERS) - {"ground"}))


def test_every_import_goes_down_or_stays_in_its_layer():
    graph = import_graph()
    assert graph["mixft.train.trainer"] and graph["mixft.cli.main"]  # the walk found the package
    wrong = layer_violations(graph)
    assert not wrong, "imports that climb a layer:\n" + "\n".join(wrong)


def test_the_layer_check_catches_an_import_that_climbs():
    # Guards the test above with a synthetic graph: one upward edge (amp -> runs), one through
    # a sideways-looking name, one into a folder the table does not know.
    graph = {
        "mixft.errors": set(),
        "mixft.amp.precision": {"mixft.errors", "mixft.runs.outdir"},  # climbs: amp -> runs
        "mixft.runs.outdir": {"mixft.errors"},
        "mixft.train.trainer": {"mixft.amp.precision", "mixft.train.hooks"},  # down and sideways: fine
        "mixft.train.hooks": set(),
        "mixft.report.markdown": {"mixft.runs.outdir"},  # climbs: report -> runs
    }
    assert layer_violations(graph) == [
        "mixft.amp.precision (amp) -> mixft.runs.outdir (runs)",
        "mixft.report.markdown (report) -> mixft.runs.outdir (runs)",
    ]
    unknown = layer_violations(
        {"mixft.x.y": {"mixft.errors"}}, layer=lambda m: m.split(".")[1] if m.count(".") > 1 else "ground"
    )
    assert unknown == ["mixft.x.y (x) -> mixft.errors (ground)"]
    assert (
        layer_of("mixft.errors") == "ground"
        and layer_of("mixft.runs.runner") == "runs"
        and layer_of("mixft") == "ground"
    )


def test_nothing_in_mixft_imports_the_applications():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            offenders += [f"{path.relative_to(PACKAGE.parent)}: {n}" for n in names if n.split(".")[0] in APPLICATIONS]
    assert not offenders, offenders


def test_no_package_level_cycle():
    # The layers as nodes (a folder is one node, each ground module its own): no two packages
    # may import each other, even through module-level edges that are not cycles themselves.
    graph = import_graph()
    rooms: dict[str, set[str]] = {}
    for module, deps in graph.items():
        room = layer_of(module) if layer_of(module) != "ground" else module
        rooms.setdefault(room, set()).update((layer_of(d) if layer_of(d) != "ground" else d) for d in deps)
        rooms[room].discard(room)
    cycle = find_cycle(rooms)
    assert cycle is None, "package-level import cycle: " + " -> ".join(cycle)


def reachable(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` imports, directly or through others: ``{module: the module that imports it}``."""
    via: dict[str, str] = {}
    todo = [start]
    while todo:
        module = todo.pop()
        for dep in sorted(graph.get(module, ())):
            if dep not in via and dep != start:
                via[dep] = module
                todo.append(dep)
    return via


def import_path(via: dict[str, str], start: str, target: str) -> str:
    chain = [target]
    while chain[-1] != start:
        chain.append(via[chain[-1]])
    return " -> ".join(reversed(chain))


def test_reachable_follows_imports_through_other_modules():
    # Guards the test below: a walk that stopped at direct imports would miss format -> x -> trainer.
    graph = {"f": {"x"}, "x": {"t", "f"}, "t": set()}
    via = reachable(graph, "f")
    assert set(via) == {"x", "t"} and import_path(via, "f", "t") == "f -> x -> t"


# The checkpoint files' format saves and loads state; restoring it into a trainer is the trainer's
# own load_state_dict. Neither format module may import the loop, not even through another module.
CHECKPOINT_FORMAT = ("mixft.train.checkpoint", "mixft.train.sharded_checkpoint")


def test_the_checkpoint_format_does_not_import_the_loop():
    graph = import_graph()
    for module in CHECKPOINT_FORMAT:
        assert "mixft.train.hooks" in graph[module]  # the walk saw its imports
        via = reachable(graph, module)
        assert "mixft.train.trainer" not in via, "the checkpoint format imports the loop: " + import_path(
            via, module, "mixft.train.trainer"
        )
    assert "Checkpointer" not in (PACKAGE / "train" / "checkpoint.py").read_text(encoding="utf-8").split('"""', 2)[2]
    assert "mixft.train.checkpoint" in graph["mixft.callbacks.checkpointer"]


def test_callbacks_read_the_trainer_through_its_protocol():
    # A callback gets the running trainer from the loop: it annotates it with hooks.TrainerLike
    # and imports no mixft.train.trainer for that.
    graph = import_graph()
    callbacks = [m for m in graph if m.startswith("mixft.callbacks.")]
    assert "mixft.callbacks.checkpointer" in callbacks  # the walk found them
    offenders = [m for m in callbacks if "mixft.train.trainer" in graph[m]]
    assert not offenders, offenders


def test_the_sharding_names_no_model():
    # FSDP asks the model for the methods it calls instead of forward (fsdp_forward_methods);
    # it does not import one model's trick (BertClassifier's [CLS]-only last layer).
    graph = import_graph()
    assert "mixft.amp.precision" in graph["mixft.train.fsdp"]  # the walk saw its imports
    assert "mixft.models.first_token_encoder" not in graph["mixft.train.fsdp"]
