#!/usr/bin/env python
"""The layout's figures (issue 29): modules per folder, import cycles, README lines, and the config walk.

Usage: ``python scripts/layout_metrics.py [--walk-only | --static-only] [--output-dir DIR]``

Works on any checkout of mixft, before or after the layout change: it reads the tree with
``ast`` and traces one tiny CLI run; it imports no mixft module by name (the run goes
through ``scripts/finetune.py`` exactly as a user starts it).

How each figure is counted (printed with the figures):

- modules per folder: ``*.py`` files directly in each folder of ``mixft/`` (``__init__.py``
  included, the metric scripts under ``metrics/<name>/`` included).
- import edges: every ``import``/``from ... import`` anywhere in a module (function-level
  imports included), resolved to the longest mixft module it names, as
  ``tests/test_import_graph.py`` does.
- cycles: strongly connected components of more than one node, (1) on modules and (2) on
  "rooms": a folder directly under ``mixft/`` is one room, each top-level module is its own room.
- the config walk: ``scripts/finetune.py --recipe mlp-synthetic --amp --max-steps 2`` runs
  in-process under ``sys.setprofile`` until the first call of ``Trainer._train_window``.
  A Python frame is ON both walks while the option is still the command line: one of its
  arguments (as called) is named ``argv`` or holds the parsed ``argparse.Namespace``. After
  that it is ON the walk of (a) the precision option when one of its arguments is named
  ``precision``/``precisions``/``amp``/``requested`` or holds a ``Precision``/``PrecisionChoice``
  object; of (b) the run config when one of its arguments holds a ``RunConfig``. An argument that
  holds the run layer's plan object counts too, since it carries them: a ``RunPlan`` for both walks,
  a ``PlannedRun`` for (a) (before issue 43's fold, no object handed down carried either: runner.py's
  ``Plan`` was unpacked where it was made, and the ``RunPlan`` of then held only file names and
  precision names, so the rule counts nothing more on older trees). Only frames whose code lives in ``mixft/`` count,
  and none while a mixft module is being imported (a ``<module>`` frame below it): building a module's constants,
  such as the precision table's rows, follows no run's value, and whether it is traced at all would depend only
  on whether the import happens before or inside ``main()``. After every call
  and return event the module of the innermost on-walk frame is noted; consecutive repeats
  collapse, leaving the sequence of rooms a reader goes through. Reported: modules opened
  (distinct modules in the sequence), transitions (length - 1), comebacks (entries of a
  module that already appeared earlier in the sequence) and the most re-entered modules.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import runpy
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mixft"


# ---- static figures -------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files}
    graph: dict[str, set[str]] = {}
    for path in files:
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target not in (name, "mixft"):
                    found.add(target)
        graph[name] = found
    return graph


def room(module: str) -> str:
    """A folder under mixft/ is one room; a top-level module is its own."""
    parts = module.split(".")
    if len(parts) == 1:
        return "mixft"
    return parts[1] + ("/" if (PACKAGE / parts[1]).is_dir() else "")


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


LONG_FUNCTION = 80  # lines, from `def` to its last line (issue 43's goal: none longer in mixft/)


def long_functions(files: list[Path]) -> list[tuple[int, str]]:
    """(length, "path:function") of each function or method longer than LONG_FUNCTION, longest first."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > LONG_FUNCTION:
                    found.append((length, f"{path.relative_to(ROOT)}:{node.name}"))
    return sorted(found, reverse=True)


def static_figures() -> list[str]:
    lines = []
    per_folder = Counter(str(p.parent.relative_to(ROOT)) for p in PACKAGE.rglob("*.py"))
    files = list(PACKAGE.rglob("*.py"))
    total_lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files)
    lines.append(f"modules: {len(files)} files, {total_lines} lines in mixft/")
    lines.append("modules per folder:")
    for folder, count in sorted(per_folder.items()):
        lines.append(f"  {folder}/: {count}")
    graph = import_graph()
    edges = sum(len(v) for v in graph.values())
    lines.append(f"import edges between modules: {edges}")
    module_cycles = strongly_connected(graph)
    lines.append(f"import cycles, module level (components > 1 module): {len(module_cycles)}")
    lines.extend(f"  {' <-> '.join(c)}" for c in module_cycles)
    rooms: dict[str, set[str]] = {}
    for module, deps in graph.items():
        rooms.setdefault(room(module), set()).update(room(d) for d in deps if room(d) != room(module))
    room_cycles = strongly_connected(rooms)
    room_edges = sum(len(v) for v in rooms.values())
    lines.append(f"rooms (folders + top-level modules): {len(rooms)}, edges between rooms: {room_edges}")
    lines.append(f"import cycles, package level (rooms; components > 1 room): {len(room_cycles)}")
    lines.extend(f"  {' <-> '.join(c)}" for c in room_cycles)
    runner = "mixft.runs.runner"  # the conductor: how much of mixft it must know (issue 43: <= 20)
    lines.append(f"{runner} imports {len(graph.get(runner, ()))} of mixft's {len(graph)} modules")
    long = long_functions(files)
    lines.append(f"functions over {LONG_FUNCTION} lines in mixft/: {len(long)}")
    lines.extend(f"  {length} {where}" for length, where in long)
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    lines.append(f"README.md: {len(text.splitlines())} lines, {len(text.encode())} bytes")
    return lines


# ---- the config walk ------------------------------------------------------------------------

PRECISION_ARGS = ("precision", "precisions", "amp", "requested")
PRECISION_TYPES = ("Precision", "PrecisionChoice")
# The run layer's plan objects carry both values: a frame handed one follows them as much as one handed the value.
# (type name, the attribute that holds the value): the old files-only RunPlan had no ``cfg``, so it does not count.
CARRIERS = {"precision": (("RunPlan", "cfg"), ("PlannedRun", "precision")), "config": (("RunPlan", "cfg"),)}


def _on_walk(frame, walk: str) -> bool:
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    values = [(n, frame.f_locals.get(n)) for n in names]
    if any(n == "argv" or type(v).__name__ == "Namespace" for n, v in values):
        return True  # the option as the CLI holds it, before it becomes a RunConfig
    if any(type(v).__name__ == kind and hasattr(v, held) for _, v in values for kind, held in CARRIERS[walk]):
        return True
    if walk == "precision":
        return any(n in PRECISION_ARGS or type(v).__name__ in PRECISION_TYPES for n, v in values)
    return any(type(v).__name__ == "RunConfig" for _, v in values)


def trace_walks(argv: list[str]) -> dict[str, list[str]]:
    """Run the CLI in-process; per walk, the sequence of modules of the innermost on-walk frame."""
    package_dir = str(PACKAGE) + os.sep
    walks = {"precision": [], "config": []}
    # Per walk, a stack parallel to the Python stack of mixft frames: module name or None.
    stacks = {w: [] for w in walks}
    frames: list = []
    done = False

    def note(walk):
        innermost = next((m for m in reversed(stacks[walk]) if m), None)
        if innermost and (not walks[walk] or walks[walk][-1] != innermost):
            walks[walk].append(innermost)

    def profiler(frame, event, arg):
        nonlocal done
        if done or event not in ("call", "return"):
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(package_dir):
            return
        module = module_name(Path(filename))
        if event == "call":
            frames.append(frame)
            importing = any(f.f_code.co_name == "<module>" for f in frames)
            for walk in walks:
                stacks[walk].append(module if not importing and _on_walk(frame, walk) else None)
                note(walk)
            if frame.f_code.co_name == "_train_window":
                done = True
                sys.setprofile(None)
        elif frames and frames[-1] is frame:
            frames.pop()
            for walk in walks:
                stacks[walk].pop()
                note(walk)

    old_argv = sys.argv
    sys.argv = [str(ROOT / "scripts" / "finetune.py"), *argv]
    sys.setprofile(profiler)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the run's own lines stay apart from the figures
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise RuntimeError(f"the traced run failed (exit {stop.code})") from stop
    finally:
        sys.setprofile(None)
        sys.argv = old_argv
    if not done:
        raise RuntimeError("the traced run never reached Trainer._train_window")
    return walks


def walk_figures(output_dir: str) -> list[str]:
    argv = ["--recipe", "mlp-synthetic", "--amp", "--max-steps", "2", "--output-dir", output_dir]
    walks = trace_walks(argv)
    lines = [f"config walk: scripts/finetune.py {' '.join(argv[:-2])} (traced up to the first Trainer._train_window)"]
    for walk, title in (("precision", "(a) the precision option"), ("config", "(b) the run config")):
        seq = walks[walk]
        seen: set[str] = set()
        comebacks = Counter()
        for module in seq:
            if module in seen:
                comebacks[module] += 1
            seen.add(module)
        top = ", ".join(f"{m.removeprefix('mixft.')} {n}x" for m, n in comebacks.most_common(5))
        lines.append(
            f"{title}: {len(seen)} modules opened, {max(len(seq) - 1, 0)} transitions, "
            f"{sum(comebacks.values())} comebacks (most: {top or 'none'})"
        )
        lines.append("  path: " + " > ".join(m.removeprefix("mixft.") for m in seq))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walk-only", action="store_true")
    parser.add_argument("--static-only", action="store_true")
    parser.add_argument("--output-dir", help="where the traced run writes (default: a temporary directory)")
    args = parser.parse_args()
    lines = []
    if not args.walk_only:
        lines += static_figures()
    if not args.static_only:
        with tempfile.TemporaryDirectory() as tmp:
            lines += walk_figures(args.output_dir or os.path.join(tmp, "walk"))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
