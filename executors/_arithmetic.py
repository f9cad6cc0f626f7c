"""A safe evaluator for the arithmetic a layer-4 answer claims: ``100 * {{quote.price}}``.

A derivation is checked by computing it, and the text comes from an LLM, so ``eval`` is
out of the question. The grammar is deliberately tiny — numbers, ``{{step.path}}``
references, ``+ - * / // % **``, unary ``-``/``+`` and parentheses — and it is enforced
on Python's own parse tree (:mod:`ast`): every node that is not on the list (a name, an
attribute, a call, a subscript, a comparison, a string, a lambda...) is refused with the
text of what was found. Python's parser does the tokenising, so there is nothing to get
wrong there; we only decide what may appear.

Why not a library: the well-known ones (``simpleeval``, ``asteval``) evaluate a far larger
language (names, functions, strings, comparisons) that would have to be switched off
piece by piece, and dagwright's core dependencies stay lean; the walker below is the whole
language.

Bounds, so a hostile expression cannot exhaust the process: the text is at most
:data:`MAX_EXPRESSION_CHARS` characters (and so the tree is shallow), an exponent is at
most :data:`MAX_EXPONENT` in magnitude, and arithmetic runs on floats whose overflow is
an error — ``(10**300)**300`` is refused, not computed digit by digit.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from orchestration.plan import REFERENCE_RE, Reference, parse_references

MAX_EXPRESSION_CHARS = 300
MAX_EXPONENT = 64

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
            ast.Mod: "%", ast.Pow: "**"}
_SLOT = "__ref{}__"


class ExpressionError(ValueError):
    """The expression is not in the grammar, or cannot be evaluated; the message says why."""


class Expression:
    """A parsed derivation: its references and literals are known before it is evaluated."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text.strip():
            raise ExpressionError("the expression is empty")
        if len(text) > MAX_EXPRESSION_CHARS:
            raise ExpressionError(
                f"the expression has {len(text)} characters; at most {MAX_EXPRESSION_CHARS}")
        self.text = text
        self.references: list[Reference] = parse_references(text)
        if "__ref" in text:
            raise ExpressionError("'__ref' is reserved")
        slots: dict[str, Reference] = {}

        def slot(match: Any) -> str:  # the i-th match is the i-th parsed reference
            index = len(slots)
            name = _SLOT.format(index)
            slots[name] = self.references[index]
            return name

        source = REFERENCE_RE.sub(slot, text)
        if "{" in source or "}" in source:
            raise ExpressionError("a '{{' or '}}' is not part of a well-formed {{step.path}} "
                                  "reference")
        try:
            tree = ast.parse(source.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExpressionError(f"not an arithmetic expression ({exc.msg})") from None
        self._slots = slots
        self._tree = tree
        self.literals: list[float] = []
        self._check(tree.body)

    def _check(self, node: ast.AST) -> None:
        """Refuse every node outside the grammar; collect the numeric literals."""
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            self._check(node.left)
            self._check(node.right)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            self._check(node.operand)
        elif isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ExpressionError(f"only numbers may appear as constants, not {value!r}")
            try:
                number = float(value)
            except OverflowError:
                raise ExpressionError("a number in the expression is too large") from None
            if not math.isfinite(number):
                raise ExpressionError(f"{value!r} is not a finite number")
            self.literals.append(number)
        elif isinstance(node, ast.Name) and node.id in self._slots:
            return
        else:
            shown = ast.unparse(node) if not isinstance(node, ast.Name) else node.id
            raise ExpressionError(
                f"{type(node).__name__.lower()} {shown!r} is not allowed: only numbers, "
                "{{step.path}} references, + - * / // % **, unary minus and parentheses")

    def evaluate(self, value_of: Callable[[Reference], float]) -> float:
        """The value, with each reference replaced by ``value_of(reference)``."""
        values = {name: float(value_of(ref)) for name, ref in self._slots.items()}
        return self._eval(self._tree.body, values)

    def _eval(self, node: ast.AST, values: dict[str, float]) -> float:
        if isinstance(node, ast.Constant):
            assert isinstance(node.value, int | float)  # _check admitted numbers only
            return float(node.value)
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.UnaryOp):
            operand = self._eval(node.operand, values)
            return -operand if isinstance(node.op, ast.USub) else operand
        assert isinstance(node, ast.BinOp)
        left = self._eval(node.left, values)
        right = self._eval(node.right, values)
        op = type(node.op)
        if op is ast.Pow and abs(right) > MAX_EXPONENT:
            raise ExpressionError(f"the exponent {right:g} is larger than {MAX_EXPONENT}")
        if op in (ast.Div, ast.FloorDiv, ast.Mod) and right == 0:
            raise ExpressionError(f"division by zero in {_SYMBOLS[op]}")
        try:
            result = _BINARY[op](left, right)
        except (OverflowError, ZeroDivisionError, ValueError) as exc:
            raise ExpressionError(f"cannot compute {left:g} {_SYMBOLS[op]} {right:g} ({exc})") from None
        if isinstance(result, complex) or not math.isfinite(result):
            raise ExpressionError(f"{left:g} {_SYMBOLS[op]} {right:g} is not a finite real number")
        return result


def evaluate(text: str, value_of: Callable[[Reference], float]) -> float:
    """Parse ``text`` and evaluate it; :class:`ExpressionError` says what is wrong."""
    return Expression(text).evaluate(value_of)
