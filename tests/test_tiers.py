"""Three tiers the code can be read by: core below parts below runs. An import never goes up.

*core*: the rollout records, the algorithm (with its own ``AlgorithmConfig``), the step, calibration,
evaluation, scores and the small utilities they stand on (numpy/scipy/scikit-learn at most: no
OmegaConf, no torch). *parts*: agent, the world model (the environment; apart from it, the data it is
trained and evaluated on, which it never imports), learner, generation, models, sft, sandbox, grading,
tasks, tracking, execution, the synthetic testbed. *runs*: trainers, orchestration, sweeps, the CLI and
the config composition at the very top (``wmrl/config.py``).

Which imports count: every ``import`` statement of a module, wherever it sits — at module level,
inside a function (a lazy import still runs, and still makes the lower tier depend on the higher one),
and under ``if TYPE_CHECKING:`` (never run, but a lower tier naming a higher tier's type is the same
dependency in the reader's head). The cycle check (``tests/test_imports.py``) uses the run-time graph:
module-level and function-local imports, without ``TYPE_CHECKING`` blocks.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from test_imports import PACKAGE, cycles, import_graph, module_files

CORE = ("wmrl.rollout", "wmrl.algorithm", "wmrl.step", "wmrl.calibration", "wmrl.evaluation",
        "wmrl.scores", "wmrl.io", "wmrl.progress", "wmrl.config_checks",
        "wmrl.resources", "wmrl.loop", "wmrl.anchor_rule", "wmrl.train_config")
PARTS = ("wmrl.agent", "wmrl.world_model", "wmrl.world_model_data", "wmrl.learner", "wmrl.generation",
         "wmrl.models", "wmrl.sft", "wmrl.sandbox", "wmrl.grading", "wmrl.tasks", "wmrl.tracking",
         "wmrl.execution", "wmrl.storage", "wmrl.config_io", "wmrl.simulate")
RUNS = ("wmrl.trainers", "wmrl.trainer_registry", "wmrl.orchestration", "wmrl.slurm", "wmrl.planning",
        "wmrl.sweep", "wmrl.cli", "wmrl.config", "wmrl.configs")
# Rooms of one tier that one of them never imports: the world-model environment the step calls is
# read without what builds its training and evaluation data.
NEVER_IMPORTS = {"wmrl.world_model": ("wmrl.world_model_data",)}
TIER_NAMES = ("core", "parts", "runs")


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def tier(module: str) -> int:
    """0 core, 1 parts, 2 runs; the package root ``wmrl`` (a docstring and a version) is core."""
    if module == "wmrl" or within(module, CORE):
        return 0
    return 2 if within(module, RUNS) else 1


def every_import_graph() -> dict[str, set[str]]:
    """module -> the wmrl modules it imports anywhere in its text (``TYPE_CHECKING`` blocks included)."""
    return import_graph(nodes=ast.walk)


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} ({TIER_NAMES[tier(m)]}) -> {d} ({TIER_NAMES[tier(d)]})"
            for m in sorted(graph) for d in sorted(graph[m]) if tier(d) > tier(m)]


def test_no_import_goes_from_a_lower_tier_to_a_higher_one():
    edges = upward_edges(every_import_graph())
    assert not edges, f"{len(edges)} import(s) go up a tier:\n" + "\n".join(edges)


def test_the_import_graph_has_no_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_cycle_even_through_type_only_imports():
    """A ``TYPE_CHECKING`` import never runs, but two modules naming each other's types are one knot for a
    reader all the same (the learner's checkpoint names what it saves by a Protocol, not by GRPOLearner)."""
    found = cycles(every_import_graph())
    assert not found, "import cycles, type-only imports included:\n" + "\n".join(" <-> ".join(c) for c in found)


def room(module: str) -> str:
    """A module's room: its top-level package or module under wmrl (``wmrl.storage.spool`` -> ``wmrl.storage``)."""
    return ".".join(module.split(".")[:2])


def arrows_back_to(top: str, graph: dict[str, set[str]]) -> list[str]:
    """Imports of ``top`` from the rooms ``top`` itself imports: the arrows that run back up to it."""
    below = {room(d) for d in graph.get(top, ())}
    return [f"{m} -> {top}" for m in sorted(graph) if room(m) in below and top in graph[m]]


def test_the_config_composition_sits_at_the_top():
    """``wmrl/config.py`` imports every section; no room it imports a section from imports it back."""
    arrows = arrows_back_to("wmrl.config", every_import_graph())
    assert not arrows, "rooms that wmrl.config composes import it back:\n" + "\n".join(arrows)


def test_an_arrow_back_to_the_top_is_named_where_there_is_one():
    graph = {"wmrl.config": {"wmrl.execution.config", "wmrl.io"}, "wmrl.execution.service": {"wmrl.config"},
             "wmrl.cli.launch": {"wmrl.config"}}
    assert arrows_back_to("wmrl.config", graph) == ["wmrl.execution.service -> wmrl.config"]


def successors(graph: dict[str, set[str]], starts: list[str]) -> set[str]:
    seen, todo = set(), list(starts)
    while todo:
        module = todo.pop()
        for dep in graph.get(module, ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_orchestration_and_what_it_imports_never_name_a_trainer():
    """The coordinator finds a trainer by name in the registry (import paths as strings), so nothing it
    reaches by import is a trainer module."""
    graph = every_import_graph()
    reached = successors(graph, [m for m in graph if within(m, ("wmrl.orchestration",))])
    assert sorted(m for m in reached if within(m, ("wmrl.trainers",))) == []


def test_an_upward_edge_is_named_where_there_is_one():
    graph = {"wmrl.step": {"wmrl.config", "wmrl.io"}, "wmrl.agent.policy": {"wmrl.rollout"},
             "wmrl.learner.grpo": {"wmrl.orchestration.coordinator"}}
    assert upward_edges(graph) == ["wmrl.learner.grpo (parts) -> wmrl.orchestration.coordinator (runs)",
                                   "wmrl.step (core) -> wmrl.config (runs)"]


def test_every_tier_prefix_names_a_module_of_the_package():
    files = module_files()  # a folder without __init__.py (wmrl/models) names its modules only
    assert [p for p in CORE + PARTS + RUNS if not any(within(m, (p,)) for m in files)] == []


def test_every_module_sits_in_a_named_room():
    """A new room (package or top-level module) is placed in a tier on purpose, not by default."""
    unplaced = [m for m in module_files() if m != "wmrl" and not within(m, CORE + PARTS + RUNS)]
    assert not unplaced, f"modules in no tier's room (add them to CORE, PARTS or RUNS): {unplaced}"


def forbidden_edges(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} -> {d}" for m in sorted(graph) for d in sorted(graph[m])
            for room, banned in NEVER_IMPORTS.items() if within(m, (room,)) and within(d, banned)]


def test_the_world_model_environment_never_imports_its_data_making():
    edges = forbidden_edges(every_import_graph())
    assert not edges, "imports a room must not make:\n" + "\n".join(edges)


def test_a_forbidden_edge_is_named_where_there_is_one():
    graph = {"wmrl.world_model.env": {"wmrl.world_model_data.variants", "wmrl.world_model.prompts"},
             "wmrl.world_model_data.targets": {"wmrl.world_model.prompts"}}
    assert forbidden_edges(graph) == ["wmrl.world_model.env -> wmrl.world_model_data.variants"]


BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = ("omegaconf", "torch")
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked: the core must not need it")
            return None
    sys.meta_path.insert(0, Block())
""")


def import_without_omegaconf_and_torch(modules: list[str]) -> subprocess.CompletedProcess:
    code = BLOCKER + "".join(f"import {m}\n" for m in modules) + textwrap.dedent("""
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not leaked, leaked
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=PACKAGE.parent, timeout=120, check=False)


def test_the_step_and_calibration_import_without_omegaconf_and_torch():
    done = import_without_omegaconf_and_torch(["wmrl.calibration", "wmrl.step"])
    assert done.returncode == 0, done.stderr


def test_every_core_module_imports_without_omegaconf_and_torch():
    core = sorted(m for m in module_files() if tier(m) == 0)
    done = import_without_omegaconf_and_torch(core)
    assert done.returncode == 0, done.stderr


def test_the_blocker_does_block():
    done = import_without_omegaconf_and_torch(["omegaconf"])
    assert done.returncode != 0 and "omegaconf is blocked" in done.stderr


def test_no_code_branches_on_a_trainers_name_outside_the_registry() -> None:
    """What differs between trainers is declared in ``wmrl/trainer_registry.py`` (its factory, what it
    prepares, its initial policy, whether it has learner ranks or a GPU plan); the rest of the package asks
    the registry, ``wmrl train`` included."""
    allowed = {"wmrl.trainer_registry"}
    found = []
    for module, path in module_files().items():
        if module in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names_trainer = any(isinstance(s, ast.Attribute) and s.attr == "trainer" for s in sides)
            names_a_string = any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides)
            if names_trainer and names_a_string:
                found.append(f"{module}:{node.lineno}")
    assert not found, f"branches on a trainer's name outside the registry: {found}"


def names_wmrl(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] == PACKAGE.name
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == PACKAGE.name for a in node.names)


def function_level_imports() -> tuple[list[str], int]:
    """(``module:line`` of each import of a wmrl module inside a function, how many imports of wmrl modules
    there are in all): the dependencies a reader cannot see at a module's top."""
    inside: list[str] = []
    total = 0
    for module, path in module_files().items():
        todo: list[tuple[ast.AST, bool]] = [(ast.parse(path.read_text(encoding="utf-8")), False)]
        while todo:
            node, in_function = todo.pop()
            if names_wmrl(node):
                total += 1
                if in_function:
                    inside.append(f"{module}:{node.lineno}")
            below = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            todo.extend((child, below) for child in ast.iter_child_nodes(node))
    return inside, total


def test_at_most_a_tenth_of_the_imports_of_wmrl_modules_sit_inside_functions():
    inside, total = function_level_imports()
    assert len(inside) <= total // 10, f"{len(inside)} of {total} inside functions: {inside}"


def test_an_import_inside_a_function_says_why():
    """The one-line comment above it (or above the run of imports it belongs to) names the reason: a heavy
    optional dependency kept off a path (torch, transformers, Pillow; ``wmrl --help``), or a cycle."""
    silent = []
    for entry in function_level_imports()[0]:
        module, line = entry.rsplit(":", 1)
        lines = module_files()[module].read_text(encoding="utf-8").splitlines()
        above = int(line) - 2
        while above >= 0 and (lines[above].lstrip().startswith(("from ", "import ", ")"))
                              or lines[above].rstrip().endswith(",")):
            above -= 1
        if above < 0 or not lines[above].lstrip().startswith("#"):
            silent.append(entry)
    assert not silent, f"function-level imports without a reason above them: {silent}"
