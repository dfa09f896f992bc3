"""Static pre-check (beyond the paper): failures that are CERTAIN settle the outcome without an LLM call.

Every finding must be a real failure when the code runs (precision 1 is measured against real
execution in ``results/world_model/``), so each rule only fires where nothing can intervene:

- ``syntax``: the code does not compile (SyntaxError, exactly as Python reports it);
- ``import``: a top-level ``import X`` of a module the probed sandbox cannot import, at a statement that
  always runs, not inside ``try``, and no ``X.py`` written by the code itself;
- ``name``: a name read at a statement that always runs and bound nowhere in the code (no assignment,
  import, definition, argument, ...) nor a builtin nor a predefined variable: NameError (skipped when
  the code uses ``import *``, ``globals()``, ``exec`` and the like);
- ``no_submission``: the code never mentions ``SUBMISSION_PATH`` nor ``submission.csv``, so the
  sandbox can find no submission file;
- ``file``: a data file named as a literal under ``DATA_DIR`` and passed straight to a reader
  (``pd.read_csv``, ``open``, ...) at a statement that always runs, but not in the data inventory; or a
  bare literal path (``pd.read_csv("train.csv")``, ``"/kaggle/input/train.csv"``) read that way and
  named nowhere else in the code (so the code did not write it first): the data is not there;
- ``column``: ``df["col"]`` on a frame read by ``pd.read_csv`` of an inventory CSV (no ``usecols``,
  ``names``, ``sep``, ``index_col``), assigned once and never modified, ``col`` absent from that CSV's
  header and never assigned anywhere in the code.

What the pre-check cannot analyse it leaves to the world model, and says why (:meth:`PreCheck.settle`,
counted by the environment as ``precheck_skipped:<reason>``): code over ``MAX_CODE_CHARS``
(``too_large``), code the parser or a rule cannot walk (``too_deep``: a RecursionError, e.g. a long
chain of ``+``), source Python cannot take as text (``unparseable``: a lone surrogate, a NUL byte where
the parser refuses it with a ValueError), or anything unexpected inside a rule (``internal:<type>``).
Nothing raises.

"Always runs" = the statement sits at module level, or in a function called at module level, or in
``if __name__ == "__main__":``, with only ``with`` blocks around it: never under ``if``, ``try``,
loops or comprehensions, where it might be skipped or caught.
"""

from __future__ import annotations

import ast
import builtins
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from wmrl.sandbox.probe import SandboxRuntime
from wmrl.world_model.verdict import CheckVerdict

READERS = {"read_csv", "read_parquet", "read_json", "read_table", "read_excel", "read_feather", "open", "load",
           "loadtxt", "genfromtxt", "imread"}
DATA_EXTS = (".csv", ".tsv", ".parquet", ".json", ".npy", ".npz", ".txt", ".zip", ".png", ".jpg", ".jpeg",
             ".feather", ".pkl", ".xlsx")
SANDBOX_DATA_MOUNT = "/sandbox/data"
PREDEFINED = {"DATA_DIR", "SUBMISSION_PATH", "__file__", "__name__", "__builtins__", "__doc__"}
MAX_CODE_CHARS = 1_000_000  # beyond any real solution; the AST walk of a larger file is not worth it


@dataclass(frozen=True)
class Settlement:
    """The pre-check's answer for one program: a certain failure, or None with why it was not analysed."""

    verdict: CheckVerdict | None
    skipped: str | None = None  # too_large, too_deep, unparseable, internal:<type>; None = analysed


@dataclass(frozen=True)
class DataInventory:
    """The public side of a task as the pre-check needs it: relative file paths and CSV headers."""

    files: frozenset[str]
    columns: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_dir(cls, public_dir: Path) -> DataInventory:
        import pandas as pd

        public_dir = Path(public_dir)
        files = frozenset(str(p.relative_to(public_dir)) for p in public_dir.rglob("*"))
        columns: dict[str, frozenset[str]] = {}
        for rel in files:
            if rel.endswith(".csv"):
                try:
                    columns[rel] = frozenset(map(str, pd.read_csv(public_dir / rel, nrows=0).columns))
                except Exception:  # noqa: BLE001, S112 - an unreadable CSV is simply not checked
                    continue
        return cls(files, columns)


def _verdict(check: str, error_type: str, line: int | None, feedback: str, reason: str) -> CheckVerdict:
    return CheckVerdict(check, "fail", 1.0, error_type, line, feedback, reason, "ok", [], source="precheck")


def _traceback(code_lines: list[str], line: int, error: str) -> str:
    source = code_lines[line - 1].strip() if 0 < line <= len(code_lines) else ""
    return f'Traceback (most recent call last):\n  File "solution.py", line {line}, in <module>\n    {source}\n{error}'


class _Reach(ast.NodeVisitor):
    """Marks the statements that always run (see the module docstring)."""

    def __init__(self, tree: ast.Module) -> None:
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.always: set[int] = set()  # id() of always-running statements
        self._walk_block(tree.body)

    def _walk_block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.always.add(id(stmt))
            if isinstance(stmt, (ast.With, ast.AsyncWith)) or (isinstance(stmt, ast.If) and _is_main_guard(stmt.test)):
                self._walk_block(stmt.body)
            for call in _direct_calls(stmt):
                fn = self.functions.pop(call, None)  # pop: each function body is walked once
                if fn is not None:
                    self._walk_block(fn.body)


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _direct_calls(stmt: ast.stmt) -> list[str]:
    """Names called by an expression statement or assignment value, e.g. ``main()``, ``x = main()``."""
    value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) else None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return [value.func.id]
    return []


def _statements(tree: ast.Module) -> list[ast.stmt]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]


SIMPLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return)
DEFERRED = (ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp)


def _evaluated(stmt: ast.stmt) -> list[ast.AST]:
    """The nodes a simple statement evaluates when it runs: not nested blocks, lambdas or comprehensions."""
    if not isinstance(stmt, SIMPLE):
        return []
    out: list[ast.AST] = []
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, DEFERRED):
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _path_parts(node: ast.expr) -> list[str]:
    """String pieces of a path expression, left to right; ``os.environ.get(...)``/``getenv`` add none
    (their default is not where the sandbox puts the data)."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) and node.value != "DATA_DIR" else []
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    if isinstance(node, ast.BinOp):
        return _path_parts(node.left) + _path_parts(node.right)
    if isinstance(node, ast.Call):
        if _call_name(node) in ("get", "getenv"):
            return []
        return [p for arg in node.args for p in _path_parts(arg)]
    return []


def _literal_file(node: ast.expr) -> str | None:
    """'train.csv' from ``os.path.join(DATA_DIR, 'train.csv')``, ``f'{DATA_DIR}/train.csv'``,
    ``Path(DATA_DIR) / 'train.csv'`` or ``DATA_DIR + '/train.csv'``; None otherwise."""
    mentions_env = any((isinstance(n, ast.Name) and n.id == "DATA_DIR")
                       or (isinstance(n, ast.Constant) and n.value == "DATA_DIR") for n in ast.walk(node))
    if not mentions_env:
        return None
    path = "/".join(p.strip("/") for p in _path_parts(node) if p.strip("/"))
    if not path.lower().endswith(DATA_EXTS) or any(ch in path for ch in "*?{}%"):
        return None
    return path


def _call_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _reads(stmt: ast.stmt) -> list[tuple[ast.Call, str]]:
    """Reader calls made by ``stmt`` itself (not in nested blocks) with a literal data file argument."""
    found = []
    for node in _evaluated(stmt):
        if isinstance(node, ast.Call) and _call_name(node) in READERS and node.args:
            path = _literal_file(node.args[0])
            if path is not None:
                found.append((node, path))
    return found


def _bare_reads(stmt: ast.stmt) -> list[str]:
    """Plain string literals naming a data file, passed straight to a reader (``pd.read_csv('train.csv')``)."""
    out = []
    for node in _evaluated(stmt):
        if isinstance(node, ast.Call) and _call_name(node) in READERS and node.args:
            arg = node.args[0]
            if (isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                    and arg.value.lower().endswith(DATA_EXTS) and _call_name(node) != "open"):
                out.append(arg.value)
    return out


class PreCheck:
    """Run :func:`check` for one task's inventory in a given sandbox runtime."""

    def __init__(self, inventory: DataInventory, runtime: SandboxRuntime) -> None:
        self.inventory = inventory
        self.runtime = runtime

    def check(self, code: str) -> CheckVerdict | None:
        """The first certain failure in source order of the rules, or None."""
        return self.settle(code).verdict

    def settle(self, code: str) -> Settlement:
        """:meth:`check` with the reason when the code was not analysed; never raises."""
        if len(code) > MAX_CODE_CHARS:
            return Settlement(None, "too_large")
        try:
            return Settlement(self._check(code))
        except RecursionError:
            return Settlement(None, "too_deep")
        except (ValueError, UnicodeError):
            return Settlement(None, "unparseable")
        except Exception as err:  # noqa: BLE001 - a rule's blind spot must not end a training step
            return Settlement(None, f"internal:{type(err).__name__}")

    def _check(self, code: str) -> CheckVerdict | None:
        lines = code.splitlines()
        try:
            # The source, as CPython compiles the file (compiling the AST object recurses deeper:
            # a 1000-term sum that runs fine would raise RecursionError there).
            compile(code, "solution.py", "exec", dont_inherit=True)
        except SyntaxError as err:
            text = "".join(traceback.format_exception_only(type(err), err)).rstrip()
            return _verdict("runtime", type(err).__name__, err.lineno, text, f"the code does not compile: {err.msg}")
        tree = ast.parse(code, filename="solution.py")
        reach = _Reach(tree)
        for rule in (self._imports, self._names, self._contract, self._files, self._columns):
            found = rule(tree, reach, lines, code)
            if found is not None:
                return found
        return None

    def _imports(self, tree: ast.Module, reach: _Reach, lines: list[str], code: str) -> CheckVerdict | None:
        for stmt in _statements(tree):
            if id(stmt) not in reach.always:
                continue
            modules = ([a.name for a in stmt.names] if isinstance(stmt, ast.Import)
                       else [stmt.module] if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module
                       else [])
            for module in modules:
                top = module.split(".")[0]
                if self.runtime.can_import(top) is False and f"{top}.py" not in code:
                    error = f"ModuleNotFoundError: No module named '{top}'"
                    return _verdict("imports", "ModuleNotFoundError", stmt.lineno,
                                    _traceback(lines, stmt.lineno, error), f"'{top}' is not installed in the sandbox")
        return None

    def _names(self, tree: ast.Module, reach: _Reach, lines: list[str], code: str) -> CheckVerdict | None:
        if any(word in code for word in ("import *", "globals(", "locals(", "exec(", "eval(", "__builtins__")):
            return None  # names can appear without a binding the parser sees
        bound = set(dir(builtins)) | PREDEFINED
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                bound |= set(node.names)
            elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
                bound.add(node.name)
        for stmt in _statements(tree):
            if id(stmt) not in reach.always:
                continue
            for node in _evaluated(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
                    error = f"NameError: name '{node.id}' is not defined"
                    return _verdict("imports", "NameError", stmt.lineno, _traceback(lines, stmt.lineno, error),
                                    f"'{node.id}' is never defined or imported")
        return None

    def _contract(self, tree: ast.Module, reach: _Reach, lines: list[str], code: str) -> CheckVerdict | None:
        if "SUBMISSION_PATH" not in code and "submission.csv" not in code:
            return _verdict("submission", "InvalidSubmission", None, "the code never writes SUBMISSION_PATH",
                            "SUBMISSION_PATH is never used, so no submission file is written")
        return None

    def _files(self, tree: ast.Module, reach: _Reach, lines: list[str], code: str) -> CheckVerdict | None:
        for stmt in _statements(tree):
            if id(stmt) not in reach.always:
                continue
            for _call, path in _reads(stmt):
                if path not in self.inventory.files:
                    error = f"FileNotFoundError: [Errno 2] No such file or directory: '{SANDBOX_DATA_MOUNT}/{path}'"
                    return _verdict("files_columns", "FileNotFoundError", stmt.lineno,
                                    _traceback(lines, stmt.lineno, error), f"{path} is not in the data inventory")
            for literal in _bare_reads(stmt):
                # Read from the work dir (or a hardcoded absolute path) and never written by the code itself.
                if code.count(repr(literal)[1:-1]) == 1 and not literal.startswith(SANDBOX_DATA_MOUNT):
                    error = f"FileNotFoundError: [Errno 2] No such file or directory: '{literal}'"
                    return _verdict("files_columns", "FileNotFoundError", stmt.lineno,
                                    _traceback(lines, stmt.lineno, error),
                                    f"{literal} is read without DATA_DIR: the data is not there")
        return None

    def _frames(self, tree: ast.Module, reach: _Reach) -> dict[str, tuple[int, frozenset[str]]]:
        """Variables bound once, by an always-running ``pd.read_csv`` of an inventory CSV: (line, columns)."""
        bound: dict[str, list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.setdefault(node.id, []).append(node)
            elif isinstance(node, ast.arg):
                bound.setdefault(node.arg, []).append(node)
        frames = {}
        for stmt in _statements(tree):
            if (id(stmt) not in reach.always or not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1
                    or not isinstance(stmt.targets[0], ast.Name) or not isinstance(stmt.value, ast.Call)):
                continue
            call, name = stmt.value, stmt.targets[0].id
            if _call_name(call) != "read_csv" or not call.args or call.keywords or len(bound.get(name, [])) != 1:
                continue
            path = _literal_file(call.args[0])
            if path in self.inventory.columns:
                frames[name] = (stmt.lineno, self.inventory.columns[path])
        return frames

    def _columns(self, tree: ast.Module, reach: _Reach, lines: list[str], code: str) -> CheckVerdict | None:
        frames = self._frames(tree, reach)
        if not frames:
            return None
        modified = set()
        stored_keys: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
                base = node.value
                while isinstance(base, (ast.Subscript, ast.Attribute)):
                    base = base.value
                if isinstance(base, ast.Name):
                    modified.add(base.id)
                if isinstance(node, ast.Subscript):
                    stored_keys |= {n.value for n in ast.walk(node.slice) if isinstance(n, ast.Constant)}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(
                    node.func.value, ast.Name) and (node.func.attr in ("insert", "pop", "rename", "set_axis")
                                                    or any(k.arg == "inplace" for k in node.keywords)):
                modified.add(node.func.value.id)
            elif isinstance(node, ast.keyword):
                # rename(columns={"a": "b"}), assign(b=...): names a frame may gain
                stored_keys |= {n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant)}
                stored_keys.add(node.arg or "")
        for stmt in _statements(tree):
            if id(stmt) not in reach.always:
                continue
            for node in _evaluated(stmt):
                if not (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                        and isinstance(node.value, ast.Name) and node.value.id in frames
                        and node.value.id not in modified):
                    continue
                line, columns = frames[node.value.id]
                keys = ([node.slice] if isinstance(node.slice, ast.Constant)
                        else list(node.slice.elts) if isinstance(node.slice, ast.List) else [])
                for key in keys:
                    if (isinstance(key, ast.Constant) and isinstance(key.value, str) and stmt.lineno > line
                            and key.value not in columns and key.value not in stored_keys):
                        error = f"KeyError: {key.value!r}"
                        return _verdict("files_columns", "KeyError", stmt.lineno, _traceback(lines, stmt.lineno, error),
                                        f"column {key.value!r} is not in {node.value.id}'s CSV")
        return None

