"""Evaluate :mod:`._mathexpr` trees: exactly where the value is rational, else in floats.

Exact values are :class:`fractions.Fraction`: integers and rationals compare exactly
(``32349`` is never ``32348``), with every intermediate capped at
:data:`MAX_BITS` bits; a power, factorial or binomial that would pass the cap raises
:class:`Huge` before it is computed. Irrational values (``\\sqrt{2}``, ``\\pi``,
``\\sin 1``) are floats; a float overflow also raises :class:`Huge`, so a huge value is
"unknown", never ``inf`` (``10^{400}`` is not ``\\infty``, and ``2^{2000}`` is not
``3^{2000}``). Only the constant ``\\infty`` evaluates to ``inf``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from reasonserve.certainindex.answers._mathexpr import Node

MAX_BITS = 8192
MAX_FACTORIAL = 1000
_FLOAT_LIMIT = 1e300

_FLOAT_FUNCS: dict[str, Callable[[float], float]] = {
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "arcsin": math.asin, "arccos": math.acos,
    "arctan": math.atan, "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh, "ln": math.log,
    "log": math.log10, "exp": math.exp, "sqrt": math.sqrt, "abs": abs,
    "cot": lambda x: 1.0 / math.tan(x), "sec": lambda x: 1.0 / math.cos(x),
    "csc": lambda x: 1.0 / math.sin(x),
}  # fmt: skip
_CONSTS = {"pi": math.pi, "e": math.e, "infty": math.inf, "inf": math.inf}


class Huge(ArithmeticError):
    """A value too large to compute or compare safely."""


def _checked(x: Fraction) -> Fraction:
    if x.numerator.bit_length() > MAX_BITS or x.denominator.bit_length() > MAX_BITS:
        raise Huge("value over the size cap")
    return x


def exact(t: Node) -> Fraction | None:
    """The exact rational value of a constant tree, or None when it is not rational.

    Raises :class:`Huge` for values over the cap and ``ZeroDivisionError`` for ``1/0``.
    """
    op = t.op
    if op == "num":
        return Fraction(t.text)
    if op in ("var", "const"):
        return None
    maybe = [exact(a) for a in t.args]
    args = [a for a in maybe if a is not None]
    if len(args) != len(maybe):
        return None
    if op == "neg":
        return -args[0]
    if op in ("+", "-", "*", "/"):
        a, b = args
        return _checked(a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else a / b)
    if op == "^":
        return _exact_power(*args)
    if op == "call":
        return _exact_call(t.text, args[0])
    if op == "root":
        return _exact_root(*args)
    return _exact_integer_op(op, args)


def _exact_power(a: Fraction, b: Fraction) -> Fraction | None:
    if b.denominator != 1:
        return _exact_root(a, 1 / b) if b.numerator == 1 else None
    bits = max(a.numerator.bit_length(), a.denominator.bit_length())
    if abs(b.numerator) * max(bits - 1, 0) > MAX_BITS:
        raise Huge("power over the size cap")
    return _checked(a ** b.numerator)


def _exact_root(a: Fraction, degree: Fraction) -> Fraction | None:
    if degree.denominator != 1 or not 1 <= degree.numerator <= 64 or a < 0:
        return None
    n = degree.numerator
    parts = []
    for x in (a.numerator, a.denominator):
        r = round(x ** (1.0 / n)) if x.bit_length() < 1000 else None
        if r is None or r**n != x:
            return None
        parts.append(r)
    return Fraction(parts[0], parts[1])


def _exact_call(name: str, x: Fraction) -> Fraction | None:
    if name == "abs":
        return abs(x)
    if name == "sqrt":
        return _exact_root(x, Fraction(2))
    return None


def _exact_integer_op(op: str, args: list[Fraction]) -> Fraction | None:
    if any(a.denominator != 1 for a in args):
        return None
    ints = [a.numerator for a in args]
    if op == "!":
        if ints[0] < 0:
            return None
        if ints[0] > MAX_FACTORIAL:
            raise Huge("factorial over the size cap")
        return Fraction(math.factorial(ints[0]))
    if op == "binom":
        n, k = ints
        if n < 0 or k < 0:
            return None
        if n > 20 * MAX_FACTORIAL:
            raise Huge("binomial over the size cap")
        return Fraction(math.comb(n, k))
    if op == "mod":
        return Fraction(ints[0] % ints[1])
    return None


def approx(t: Node, env: dict[str, float]) -> float:
    """The float value of a tree at ``env``; NaN for domain errors, :class:`Huge` on overflow."""
    try:
        value = _approx(t, env)
    except OverflowError as exc:
        raise Huge("float overflow") from exc
    except (ValueError, ZeroDivisionError, TypeError):
        return math.nan
    if isinstance(value, complex):
        return math.nan
    return value


def _approx(t: Node, env: dict[str, float]) -> float:
    op = t.op
    if op == "num":
        return _finite(float(t.text), [])
    if op == "var":
        return env[t.text]
    if op == "const":
        return _CONSTS[t.text]
    args = [_approx(a, env) for a in t.args]
    if op == "neg":
        return -args[0]
    if op == "call":
        return _finite(float(_FLOAT_FUNCS[t.text](args[0])), args)
    if op in ("!", "binom", "mod"):
        return _approx_integer_op(op, args)
    a, b = args
    if op == "+":
        return _finite(a + b, args)
    if op == "-":
        return _finite(a - b, args)
    if op == "*":
        return _finite(a * b, args)
    if op == "/":
        return _finite(a / b, args)
    return _finite(_pow(a, 1.0 / b if op == "root" else b), args)


def _approx_integer_op(op: str, args: list[float]) -> float:
    if not all(math.isfinite(a) and float(a).is_integer() for a in args):
        return math.nan
    value = _exact_integer_op(op, [Fraction(int(a)) for a in args])
    return math.nan if value is None else _finite(float(value), args)


def _finite(x: float, inputs: list[float]) -> float:
    """Overflow is :class:`Huge`; ``inf`` only passes through from ``\\infty`` itself."""
    if math.isinf(x) and not any(math.isinf(i) for i in inputs):
        raise Huge("float overflow")
    if math.isfinite(x) and abs(x) > _FLOAT_LIMIT:
        raise Huge("float over the magnitude cap")
    return x


def _pow(a: float, b: float) -> float:
    if a < 0 and not float(b).is_integer():
        return math.nan  # no complex results
    return math.pow(a, b)
