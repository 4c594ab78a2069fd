"""A small, safe expression language for derived axes and constraints.

``rollout_gpus // rollout_tp``, ``budget - rollout_gpus``, ``rollout_gpus % rollout_tp == 0 and
training_gpus >= 4``: arithmetic, comparisons, ``and`` / ``or`` / ``not``, ``x if c else y`` and
the functions ``min max abs round int float``. Names are the space's variables. Parsed once
with `ast`; anything else (attributes, subscripts, lambdas, other calls) is rejected at load
time with the offending construct named.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}
_FUNCS = {"min": min, "max": max, "abs": abs, "round": round, "int": int, "float": float, "log2": math.log2}


class ExprError(ValueError):
    """An expression that does not parse, uses a forbidden construct, or names an unknown variable."""


class Expr:
    def __init__(self, text: str, where: str):
        self.text, self.where = str(text), where
        try:
            self.tree = ast.parse(self.text, mode="eval")
        except SyntaxError as exc:
            raise ExprError(f"{where}: cannot parse {self.text!r}: {exc.msg}") from None
        self.names: set[str] = set()
        self._check(self.tree.body)

    def _check(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            self.names.add(node.id)
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, int | float | bool | str):
                raise ExprError(f"{self.where}: constant {node.value!r} not allowed in {self.text!r}")
        elif isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            self._check(node.left)
            self._check(node.right)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
            self._check(node.operand)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                self._check(v)
        elif isinstance(node, ast.Compare) and all(type(o) in _CMP for o in node.ops):
            self._check(node.left)
            for c in node.comparators:
                self._check(c)
        elif isinstance(node, ast.IfExp):
            for n in (node.test, node.body, node.orelse):
                self._check(n)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
              and not node.keywords):
            for a in node.args:
                self._check(a)
        else:
            raise ExprError(f"{self.where}: {type(node).__name__} is not allowed in {self.text!r} "
                            f"(arithmetic, comparisons, and/or/not, if-else, {', '.join(_FUNCS)})")

    def check_names(self, known: set[str]) -> None:
        unknown = sorted(self.names - known - set(_FUNCS))
        if unknown:
            raise ExprError(f"{self.where}: unknown variable {unknown[0]!r} in {self.text!r}; "
                            f"known: {', '.join(sorted(known)) or '(none)'}")

    def __call__(self, env: dict[str, Any]) -> Any:
        return self._eval(self.tree.body, env)

    def _eval(self, node: ast.AST, env: dict[str, Any]) -> Any:
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            return _FUNCS[node.id]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp):
            return _BIN[type(node.op)](self._eval(node.left, env), self._eval(node.right, env))
        if isinstance(node, ast.UnaryOp):
            v = self._eval(node.operand, env)
            return -v if isinstance(node.op, ast.USub) else (+v if isinstance(node.op, ast.UAdd) else not v)
        if isinstance(node, ast.BoolOp):
            vals = (self._eval(v, env) for v in node.values)
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, env)
            for op, c in zip(node.ops, node.comparators, strict=True):
                right = self._eval(c, env)
                if not _CMP[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return self._eval(node.body if self._eval(node.test, env) else node.orelse, env)
        assert isinstance(node, ast.Call)
        return _FUNCS[node.func.id](*(self._eval(a, env) for a in node.args))
