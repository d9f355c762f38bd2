"""The layout the README promises: which folder imports which, and what stays private."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import ROOT

PACKAGES = ("mcts_ext", "alphazero", "selfplay", "learner", "eval")
MAY_IMPORT = {
    "mcts_ext": set(),
    "alphazero": {"mcts_ext"},
    "selfplay": {"alphazero", "mcts_ext"},
    "learner": {"alphazero", "mcts_ext"},
    "eval": {"alphazero", "mcts_ext"},
}
"""The README's layout table: the project's packages each folder may import."""

ROOMS = {
    "alphazero": set(),  # the package's own modules: errors, config, presets, console, search parameters
    "alphazero.chess": set(),
    "alphazero.nn": {"alphazero.chess"},
    "alphazero.store": {"alphazero.chess", "alphazero.nn"},
    "alphazero.app": {"alphazero.chess", "alphazero.nn", "alphazero.store", "selfplay", "learner", "eval"},
}
"""The rooms of alphazero/ (the README's second table) and what each may import besides the package's own
modules and mcts_ext: the application alone brings selfplay, learner and eval together."""


def _room(path: Path) -> str:
    """The room of a module of alphazero/ ('alphazero' for the package's own modules; __main__ is the app's)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts == ("alphazero", "__main__"):
        return "alphazero.app"
    return ".".join(parts[:2]) if len(parts) > 2 else "alphazero"


def _sources(folder: str, suffixes: tuple[str, ...] = (".py",)) -> Iterator[Path]:
    for path in sorted((ROOT / folder).rglob("*")):
        if path.suffix in suffixes and "build" not in path.relative_to(ROOT).parts:
            yield path


def _imported(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Yields (module, names imported from it) for every absolute import in a Python or Cython file."""
    if path.suffix in (".pyx", ".pxd"):  # Cython: read its Python-style import lines
        for line in path.read_text().splitlines():
            words = line.replace(",", " ").split()
            if len(words) >= 2 and words[0] in ("import", "from", "cimport"):
                yield words[1], words[3:] if words[0] == "from" else []
        return
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [alias.name for alias in node.names]


def test_each_folder_imports_only_what_the_layout_allows() -> None:
    wrong = []
    for package in PACKAGES:
        for path in _sources(package, (".py", ".pyx", ".pxd")):
            if package == "alphazero" and _room(path) == "alphazero.app":
                continue  # the application: the next test
            for module, _ in _imported(path):
                top = module.split(".")[0]
                if top in PACKAGES and top != package and top not in MAY_IMPORT[package]:
                    wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not wrong


def test_each_room_of_alphazero_imports_only_the_rooms_below_it() -> None:
    wrong = []
    for path in _sources("alphazero"):
        room = _room(path)
        for module, _ in _imported(path):
            parts = module.split(".")
            if parts[0] not in PACKAGES or parts[0] == "mcts_ext":
                continue
            target = f"alphazero.{parts[1]}" if f"alphazero.{'.'.join(parts[1:2])}" in ROOMS else parts[0]
            if target not in {room, "alphazero", *ROOMS[room]}:
                wrong.append(f"{path.relative_to(ROOT)} ({room}) imports {module}")
    assert not wrong
    assert {_room(path) for path in _sources("alphazero")} == set(ROOMS)  # no module outside a room


def test_the_chess_core_needs_numpy_alone() -> None:
    outside = {module for path in _sources("mcts_ext", (".py", ".pyx", ".pxd")) for module, _ in _imported(path)
               if module.split(".")[0] not in {*sys.stdlib_module_names, "mcts_ext", "numpy", "libc", "cython"}}
    assert not outside


def test_no_module_outside_selfplay_reaches_for_its_private_names() -> None:
    wrong = []
    for folder in (*PACKAGES, "tests"):
        if folder == "selfplay":
            continue
        for path in _sources(folder):
            tree = ast.parse(path.read_text())
            selfplay_modules = set()  # names bound to selfplay modules in this file
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "selfplay":
                    for alias in node.names:
                        if alias.name.startswith("_"):
                            wrong.append(f"{path.name}: from {node.module} import {alias.name}")
                        selfplay_modules.add(alias.asname or alias.name)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id in selfplay_modules and node.attr.startswith("_")
                        and not node.attr.startswith("__")):
                    wrong.append(f"{path.name}: {node.value.id}.{node.attr}")
    assert not wrong


def test_no_test_module_imports_another() -> None:
    wrong = [f"{path.name} imports {module}" for path in _sources("tests") for module, _ in _imported(path)
             if module.startswith("tests.test_")]
    assert not wrong  # shared helpers live in tests/helpers.py and tests/conftest.py


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Each module of the packages and the package modules it imports: at the top, inside functions and under
    TYPE_CHECKING alike (a circle through any of them is one a reader has to hold in mind)."""
    modules = {_module_name(path): path for package in PACKAGES for path in _sources(package)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = set()
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # A module's own package (its __init__) is not an edge: importing a submodule runs it first anyway.
            if target and target != name and not name.startswith(f"{target}."):
                graph[name].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert not _circles(_import_graph())


MAX_MODULE_LINES = 600
"""A module longer than this says why in its opening comment, with a line that begins 'Over 600 lines:'."""


def test_no_module_is_over_600_lines_without_a_reason() -> None:
    long = []
    for package in PACKAGES:
        for path in _sources(package, (".py", ".pyx", ".pxd")):
            text = path.read_text()
            if text.count("\n") > MAX_MODULE_LINES:
                opening = text.split('"""')[1] if text.count('"""') >= 2 else ""
                if "Over 600 lines:" not in opening:
                    long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not long
