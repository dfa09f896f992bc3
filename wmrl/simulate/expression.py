"""Safe arithmetic expressions in the true score ``r`` for the synthetic world model's distortion phi.

``simulator.phi='0.2 + 0.6*r'``, ``'1 - (1 - r)**3'``, ``'0.5 + 0.4*sin(2*pi*r)'`` or ``'0.3'`` (a
constant) are parsed with :mod:`ast` and evaluated by walking a whitelisted tree on numpy arrays: no
``eval``, no names but ``r``/``pi``/``e``, no attributes, subscripts, lambdas or keyword arguments, so a
config value can never run code. Numbers are float64 (``10**10**10`` is ``inf``, not a hanging big-int
power), and the expression must be finite on [0, 1] (checked when the config is loaded).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

import numpy as np

MAX_LENGTH = 200
CONSTANTS = {"pi": np.pi, "e": np.e}
FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "exp": np.exp, "log": np.log,
    "sqrt": np.sqrt, "abs": np.abs, "min": np.minimum, "max": np.maximum, "clip": np.clip,
}
ARITY = {"min": 2, "max": 2, "clip": 3}
BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.Pow: operator.pow}
UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
SYNTAX = (
    "numbers, r, pi, e, + - * / ** and parentheses, and the functions "
    + ", ".join(f"{name}()" for name in FUNCTIONS)
)


class ExpressionError(ValueError):
    """The expression is not one the whitelist allows; the message says what and where."""


class Expression:
    """A parsed, whitelisted expression; call it on an array of true scores."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text.strip():
            raise ExpressionError(f"expected an arithmetic expression in r, got {text!r}; allowed: {SYNTAX}")
        if len(text) > MAX_LENGTH:
            raise ExpressionError(f"expression of {len(text)} characters; at most {MAX_LENGTH} allowed")
        self.text = text
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as err:
            raise ExpressionError(f"{text!r} is not an arithmetic expression ({err.msg}); allowed: {SYNTAX}") from None
        self._body = tree.body
        self._check(self._body)

    def _check(self, node: ast.AST) -> None:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                self._refuse(node, f"the literal {node.value!r}")
        elif isinstance(node, ast.Name):
            if node.id != "r" and node.id not in CONSTANTS:
                self._refuse(node, f"the name {node.id!r}")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in BINARY:
                self._refuse(node, f"the operator {type(node.op).__name__}")
            self._check(node.left)
            self._check(node.right)
        elif isinstance(node, ast.UnaryOp):
            if type(node.op) not in UNARY:
                self._refuse(node, f"the operator {type(node.op).__name__}")
            self._check(node.operand)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                self._refuse(node, f"the call {ast.unparse(node.func)}()")
            if node.keywords:
                self._refuse(node, "keyword arguments")
            want = ARITY.get(node.func.id, 1)  # type: ignore[union-attr]
            if len(node.args) != want:
                self._refuse(node, f"{node.func.id}() with {len(node.args)} argument(s) (takes {want})")  # type: ignore[union-attr]
            for arg in node.args:
                self._check(arg)
        else:
            self._refuse(node, f"a {type(node).__name__} ({ast.unparse(node)!r})")

    def _refuse(self, node: ast.AST, what: str) -> None:
        col = getattr(node, "col_offset", 0)
        raise ExpressionError(f"{self.text!r}: {what} at column {col + 1} is not allowed; allowed: {SYNTAX}")

    def _eval(self, node: ast.AST, r: np.ndarray) -> np.ndarray:
        if isinstance(node, ast.Constant):
            return np.full(r.shape, float(node.value))
        if isinstance(node, ast.Name):
            return r if node.id == "r" else np.full(r.shape, CONSTANTS[node.id])
        if isinstance(node, ast.BinOp):
            return BINARY[type(node.op)](self._eval(node.left, r), self._eval(node.right, r))
        if isinstance(node, ast.UnaryOp):
            return UNARY[type(node.op)](self._eval(node.operand, r))
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)  # _check allowed nothing else
        return FUNCTIONS[node.func.id](*(self._eval(a, r) for a in node.args))

    def __call__(self, r: np.ndarray) -> np.ndarray:
        r = np.asarray(r, dtype=np.float64)
        with np.errstate(all="ignore"):  # a non-finite value is reported by check_finite, not a warning
            return np.asarray(self._eval(self._body, r), dtype=np.float64)

    def check_finite(self) -> None:
        """Raise unless the expression is finite everywhere on a fine grid of [0, 1]."""
        grid = np.linspace(0.0, 1.0, 1001)
        bad = ~np.isfinite(self(grid))
        if bad.any():
            raise ExpressionError(f"{self.text!r} is not finite at r = {grid[bad][0]:g}; phi must be finite on [0, 1]")
