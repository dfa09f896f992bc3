"""Read an MLE-Dojo ``utils/metric.py`` as text: which class it defines, its ``higher_is_better``,
its ``value`` columns and a fingerprint of its ``evaluate``. Foreign code is parsed with ``ast``,
never imported or executed."""

from __future__ import annotations

import ast
import hashlib
import io
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path

from wmrl.tasks.task import TaskError

BASE_CLASS = "CompetitionMetrics"


@dataclass(frozen=True)
class MetricSource:
    path: Path
    class_name: str
    higher_is_better: bool
    value_columns: tuple[str, ...] | None  # the ``value`` default, split at commas; None when not a string
    evaluate_fingerprint: str  # sha256 of evaluate()'s tokens without comments or layout, first 16 hex


def fingerprint(source: str) -> str:
    """Layout- and comment-insensitive hash of a piece of Python source."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    text = " ".join(t.string for t in tokens if t.type not in skip)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _default(func: ast.FunctionDef, name: str) -> ast.expr | None:
    args = func.args.args
    defaults = func.args.defaults
    for arg, default in zip(args[len(args) - len(defaults):], defaults, strict=True):
        if arg.arg == name:
            return default
    return None


def read_metric_source(path: Path) -> MetricSource:
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as err:
        raise TaskError(f"{path}: cannot read the metric definition: {err}") from err
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)
               and any(getattr(base, "id", getattr(base, "attr", None)) == BASE_CLASS for base in node.bases)]
    if len(classes) != 1:
        raise TaskError(f"{path}: expected exactly one class deriving from {BASE_CLASS}, found {len(classes)}")
    cls = classes[0]
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    init, evaluate = methods.get("__init__"), methods.get("evaluate")
    if evaluate is None:
        raise TaskError(f"{path}: class {cls.name} has no evaluate() method")
    higher = _default(init, "higher_is_better") if init else None
    if not (isinstance(higher, ast.Constant) and isinstance(higher.value, bool)):
        raise TaskError(f"{path}: class {cls.name}: __init__ must give higher_is_better a literal True/False default")
    value = _default(init, "value") if init else None
    columns = None
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        columns = tuple(c.strip() for c in value.value.split(",") if c.strip())
    segment = textwrap.dedent(" " * evaluate.col_offset + (ast.get_source_segment(text, evaluate) or ""))
    return MetricSource(path, cls.name, bool(higher.value), columns or None, fingerprint(segment))
