"""The package has no import cycle: every module imports on its own, and the graph of wmrl's imports
(module level and inside functions alike, since a lazy import only hides a cycle) is acyclic."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "wmrl"


def module_files() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node, except what sits under ``if TYPE_CHECKING:`` (never imported at run time)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def import_graph(nodes: Callable[[ast.AST], Iterable[ast.AST]] = runtime_nodes) -> dict[str, set[str]]:
    """module -> the wmrl modules it imports (``from a import b`` counts a.b when b is a module);
    ``nodes``: which statements of a module count (default: those that run, see ``runtime_nodes``).

    Importing ``wmrl.x.y`` from outside package ``wmrl.x`` first runs ``wmrl/x/__init__.py``, so that
    import also depends on the package; inside the package its ``__init__`` has already run.
    """
    files = module_files()
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                deps |= {f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names}
        for dep in list(deps):
            parts = dep.split(".")
            deps |= {".".join(parts[:k]) for k in range(2, len(parts)) if not name.startswith(".".join(parts[:k]))}
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root, children in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(children)))]
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
                    found.append(sorted(component))
    return found


def test_the_import_graph_of_the_package_has_no_cycle():
    assert cycles(import_graph()) == []


def test_a_cycle_is_found_where_there_is_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_config_checks_is_a_leaf():
    assert import_graph()["wmrl.config_checks"] == set()


@pytest.fixture(scope="module")
def fresh_imports() -> dict[str, subprocess.CompletedProcess[str]]:
    """Each module imported alone in its own fresh interpreter, as many at once as there are cores
    (one after another they took ~230 s of a 2-core CI run: the interpreters wait on their imports)."""

    def load(module: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                              cwd=PACKAGE.parent, timeout=600, check=False)

    modules = sorted(module_files())
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        return dict(zip(modules, pool.map(load, modules), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(module_files()))
def test_module_imports_on_its_own_in_a_fresh_interpreter(module, fresh_imports):
    done = fresh_imports[module]
    assert done.returncode == 0, done.stderr


def test_orchestration_imports_no_trainer_and_nothing_of_the_simulator():
    graph = import_graph()
    offenders = {(m, d) for m, deps in graph.items() if m.startswith("wmrl.orchestration")
                 for d in deps if d.startswith(("wmrl.simulate", "wmrl.trainers."))}
    assert offenders == set()
