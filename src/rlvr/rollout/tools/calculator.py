"""`calculator`: arithmetic on an expression, evaluated by walking its syntax tree (never `eval`)."""

from __future__ import annotations

import ast
import math
import operator
from typing import Annotated, Any

from pydantic import Field

from rlvr.rollout.tools.base import TOOLS, Tool, ToolError

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt, "floor": math.floor,
              "ceil": math.ceil}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def format_number(value: float | int) -> str:
    """Integers exactly; floats with 12 significant digits, integral ones without a trailing '.0'."""
    if isinstance(value, bool):
        raise ToolError("booleans are not numbers here")
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise ToolError("the result is not a finite number")
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".12g")


@TOOLS.register("calculator")
class Calculator(Tool):
    """Evaluates + - * / // % ** and parentheses over integers and decimals, plus abs, round, min, max, sqrt,
    floor, ceil, pi and e. Integers are exact (Python ints); huge powers and results are refused."""

    name = "calculator"
    description = "Evaluate an arithmetic expression, e.g. 48213+9921 or (3.5*2)**2. Returns the number."
    parameters = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "The arithmetic expression."}},
        "required": ["expression"],
    }

    def __init__(self, *, timeout: Annotated[float, Field(gt=0)] = 2.0,
                 max_length: Annotated[int, Field(ge=1)] = 256, max_digits: Annotated[int, Field(ge=1)] = 1000):
        self.timeout, self.max_length, self.max_digits = timeout, max_length, max_digits

    def call(self, args: dict[str, Any]) -> str:
        return format_number(self.evaluate(args["expression"]))

    def evaluate(self, expression: str) -> float | int:
        text = expression.strip()
        if not text:
            raise ToolError("empty expression")
        if len(text) > self.max_length:
            raise ToolError(f"expression longer than {self.max_length} characters")
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError:
            raise ToolError(f"cannot parse expression {text!r}") from None
        return self._eval(tree.body)

    def _eval(self, node: ast.AST) -> float | int:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self._eval(node.left), self._eval(node.right)
            if isinstance(node.op, ast.Pow):
                self._check_power(left, right)
            try:
                value = _BINARY[type(node.op)](left, right)
            except ZeroDivisionError:
                raise ToolError("division by zero") from None
            except OverflowError:
                raise ToolError("the result is too large") from None
            return self._check_size(value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
            raise ToolError("'^' is not a power here; use **")
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self._eval(node.operand))
        if isinstance(node, ast.Name) and node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
                and not node.keywords and node.args):
            values = [self._eval(a) for a in node.args]
            try:
                return self._check_size(_FUNCTIONS[node.func.id](*values))
            except (TypeError, ValueError) as err:
                raise ToolError(f"{node.func.id}: {err}") from None
        raise ToolError(f"unsupported expression element: {ast.unparse(node)[:40]!r}")

    def _check_power(self, base: float | int, exponent: float | int) -> None:
        if abs(exponent) > 10_000 or (isinstance(base, int) and isinstance(exponent, int)
                                      and abs(base) > 1 and exponent * math.log10(abs(base)) > self.max_digits):
            raise ToolError("the power is too large")

    def _check_size(self, value: float | int) -> float | int:
        if isinstance(value, int) and value.bit_length() > self.max_digits * 3.33:
            raise ToolError(f"the result has more than {self.max_digits} digits")
        return value
