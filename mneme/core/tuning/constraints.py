"""The constraint language of search spaces: small arithmetic and logic over parameter values.

A constraint is data from a space file, never code (docs/security.md). Its text is parsed
with Python's expression grammar (`ast.parse`, which only builds a tree), every node is
checked against a short whitelist, and the tree is evaluated here, node by node: no
`eval`, no `compile`, no attribute access, no calls but `min`, `max` and `abs`.

Grammar: parameter names, numbers, strings, True/False, ``+ - * / // % **``, comparisons
(chained too), ``and or not``, ``min(...) max(...) abs(...)`` and ``a if cond else b``.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from typing import Any

from mneme.core import limits
from mneme.core.errors import FormatError

#: Longest constraint text accepted (characters).
MAX_LENGTH = 2000
#: Largest integer a constraint may compute (bits): 2**4096 is far beyond any launch parameter.
MAX_INT_BITS = 4096

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_CALLS = {"min": min, "max": max, "abs": abs}
_CONSTANTS = (bool, int, float, str)


class ConstraintError(FormatError):
    """A constraint is not in the language, or cannot be evaluated on a point (invalid input: exit code 2)."""

    exit_code = 2


class Constraint:
    """One parsed constraint; `holds(params)` evaluates it on a point's parameter values."""

    def __init__(self, text: str, *, source: Any = None, field: str = "constraints"):
        self.text = text
        self.source = source
        self.field = field
        if not isinstance(text, str) or not text.strip():
            raise ConstraintError(source, f"a constraint is a non-empty expression, got {text!r}", field=field)
        if len(text) > MAX_LENGTH:
            raise ConstraintError(
                source, f"constraint of {len(text)} characters is longer than {MAX_LENGTH}", field=field
            )
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise ConstraintError(source, f"constraint {text!r} does not parse: {exc}", field=field) from None
        self._tree = tree.body
        self.names = sorted(self._check(self._tree, set()))

    def _fail(self, message: str) -> ConstraintError:
        return ConstraintError(self.source, f"constraint {self.text!r}: {message}", field=self.field)

    def _check(self, node: ast.AST, names: set[str]) -> set[str]:
        """Walk the tree once (iteratively), refusing every node outside the language."""
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.Constant):
                if not isinstance(n.value, _CONSTANTS):
                    raise self._fail(f"{n.value!r} is not a number, string or boolean")
            elif isinstance(n, ast.Name):
                if n.id in _CALLS:
                    raise self._fail(f"{n.id} is a function; call it: {n.id}(...)")
                names.add(n.id)
            elif isinstance(n, ast.BinOp) and type(n.op) in _BINARY:
                stack += [n.left, n.right]
            elif isinstance(n, ast.UnaryOp) and type(n.op) in _UNARY:
                stack.append(n.operand)
            elif isinstance(n, ast.BoolOp):
                stack += n.values
            elif isinstance(n, ast.Compare) and all(type(op) in _COMPARE for op in n.ops):
                stack += [n.left, *n.comparators]
            elif isinstance(n, ast.IfExp):
                stack += [n.test, n.body, n.orelse]
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and n.func.id in _CALLS
                and not n.keywords
                and n.args
                and not any(isinstance(a, ast.Starred) for a in n.args)
            ):
                stack += n.args
            else:
                what = type(n).__name__
                if isinstance(n, ast.Call):
                    what = "a call of anything but min, max and abs"
                elif isinstance(n, ast.Attribute):
                    what = f"attribute access (.{n.attr})"
                raise self._fail(
                    f"{what} is not part of the constraint language (names, numbers, "
                    "+ - * / // % **, comparisons, and/or/not, min/max/abs, x if c else y)"
                )
        return names

    def holds(self, params: Mapping[str, Any]) -> bool:
        """Whether the point satisfies the constraint; a `ConstraintError` when it cannot be evaluated."""
        try:
            return bool(self._eval(self._tree, params))
        except ConstraintError:
            raise
        except (ArithmeticError, TypeError, ValueError, RecursionError) as exc:
            raise self._fail(f"cannot be evaluated on {dict(params)}: {exc}") from None

    def _eval(self, n: ast.AST, params: Mapping[str, Any]) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in params:
                raise self._fail(f"{n.id!r} is not a parameter of the space; known: {', '.join(sorted(params))}")
            return _bounded(params[n.id], self)
        if isinstance(n, ast.BinOp):
            left, right = self._eval(n.left, params), self._eval(n.right, params)
            if isinstance(n.op, ast.Pow) and _too_big_power(left, right):
                raise self._fail(f"{left!r} ** {right!r} is too large")
            if isinstance(n.op, ast.Mult) and (isinstance(left, str) or isinstance(right, str)):
                raise self._fail("strings cannot be multiplied")
            if isinstance(n.op, ast.Mod) and isinstance(left, str):  # printf-style formatting: '%099999999d' % 1
                raise self._fail("% formats strings in Python; the constraint language keeps it for numbers")
            if isinstance(n.op, ast.Add) and isinstance(left, str) and isinstance(right, str):
                _chars(len(left) + len(right), self)  # before the joined string is made
            return _bounded(_BINARY[type(n.op)](left, right), self)
        if isinstance(n, ast.UnaryOp):
            return _UNARY[type(n.op)](self._eval(n.operand, params))
        if isinstance(n, ast.BoolOp):
            if isinstance(n.op, ast.And):
                value: Any = True
                for v in n.values:
                    value = self._eval(v, params)
                    if not value:
                        return value
                return value
            value = False
            for v in n.values:
                value = self._eval(v, params)
                if value:
                    return value
            return value
        if isinstance(n, ast.Compare):
            left = self._eval(n.left, params)
            for op, comparator in zip(n.ops, n.comparators):
                right = self._eval(comparator, params)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(n, ast.IfExp):
            return self._eval(n.body, params) if self._eval(n.test, params) else self._eval(n.orelse, params)
        if isinstance(n, ast.Call):
            return _CALLS[n.func.id](*(self._eval(a, params) for a in n.args))  # type: ignore[attr-defined]
        raise self._fail(f"{type(n).__name__} is not part of the constraint language")  # checked at parse time

    def __repr__(self) -> str:
        return f"Constraint({self.text!r})"


def _too_big_power(base: Any, exponent: Any) -> bool:
    if isinstance(base, int) and isinstance(exponent, int) and not isinstance(base, bool):
        return exponent > 0 and abs(base) > 1 and exponent * max(abs(base).bit_length(), 1) > MAX_INT_BITS
    return False


def _chars(length: int, constraint: Constraint) -> None:
    bound = limits.limit("value_chars")
    if length > bound:
        raise constraint._fail(
            f"a value it computes would hold {length} characters, over the limit value_chars="
            f"{bound}; raise it with {limits.variable('value_chars')}=N if the space is trusted"
        )


def _bounded(value: Any, constraint: Constraint) -> Any:
    """`value` when it is small enough to compute with: every intermediate value is bounded."""
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise constraint._fail(f"an intermediate integer has more than {MAX_INT_BITS} bits")
    if isinstance(value, (str, bytes, list, tuple, dict)):
        _chars(len(value), constraint)
    return value


def parse_all(texts: Any, *, source: Any = None) -> tuple[Constraint, ...]:
    """Constraints from a space description's `constraints` (a string or a list of strings)."""
    if texts is None:
        return ()
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list):
        raise ConstraintError(
            source, f"must be an expression or a list of expressions, got {type(texts).__name__}", field="constraints"
        )
    return tuple(Constraint(t, source=source, field=f"constraints[{i}]") for i, t in enumerate(texts))
