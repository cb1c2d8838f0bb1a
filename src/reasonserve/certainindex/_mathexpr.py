"""A restricted parser and evaluator for the math in model answers. No ``eval``.

Model output is untrusted, so it is never handed to Python, sympy or any general
parser. This module tokenizes a small LaTeX/ASCII arithmetic language into a tree
and evaluates it with floats:

``numbers, letters (variables), + - * / ^, implicit products (2x, 3\\pi), ( ) { } [ ],
\\frac{a}{b}, \\sqrt{x}, \\sqrt[n]{x}, \\pi, \\infty, \\sin \\cos \\tan \\ln \\log \\exp``

Every input is bounded before any work: at most :data:`MAX_CHARS` characters and
:data:`MAX_NODES` tree nodes, powers are evaluated in floats (``10^10^10`` is an
overflow, not a billion-digit integer), and a deadline is checked at every node, so a
hostile string can neither execute anything nor run for long.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

MAX_CHARS = 400
MAX_NODES = 400

_FUNCS = {
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "ln": math.log, "log": math.log10,
    "exp": math.exp, "sqrt": math.sqrt,
}  # fmt: skip
_CONSTS = {"pi": math.pi, "infty": math.inf, "inf": math.inf}
_TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|\\([a-zA-Z]+)|([a-zA-Z])|(\*\*|[-+*/^(){}\[\],]))")


class ExprError(ValueError):
    """The text is not in the restricted language, or is too big or too slow."""


@dataclass(frozen=True, slots=True)
class Node:
    op: str  # "num", "var", "neg", "+", "-", "*", "/", "^", "call", "root"
    args: tuple = ()
    value: float = 0.0
    name: str = ""


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExprError(f"unexpected character {text[pos]!r}")
        num, cmd, letter, sym = m.groups()
        if num is not None:
            out.append(("num", num))
        elif cmd is not None:
            out.append(("cmd", cmd))
        elif letter is not None:
            out.append(("var", letter))
        else:
            out.append(("sym", "^" if sym == "**" else sym))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], deadline: float) -> None:
        self.tokens, self.i, self.nodes, self.deadline = tokens, 0, 0, deadline

    def node(self, op: str, *args: Node, value: float = 0.0, name: str = "") -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ExprError("expression too large")
        if time.monotonic() > self.deadline:
            raise ExprError("time limit")
        return Node(op, args, value, name)

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, kind: str, text: str | None = None) -> str:
        tok = self.peek()
        if tok is None or tok[0] != kind or (text is not None and tok[1] != text):
            raise ExprError(f"expected {text or kind}, got {tok}")
        self.i += 1
        return tok[1]

    def parse(self) -> Node:
        tree = self.expr()
        if self.peek() is not None:
            raise ExprError(f"unexpected {self.peek()}")
        return tree

    def expr(self) -> Node:
        left = self.term()
        while (tok := self.peek()) is not None and tok in (("sym", "+"), ("sym", "-")):
            self.i += 1
            left = self.node(tok[1], left, self.term())
        return left

    def term(self) -> Node:
        left = self.unary()
        while (tok := self.peek()) is not None:
            if tok in (("sym", "*"), ("sym", "/")) or tok == ("cmd", "cdot") or tok == ("cmd", "times"):
                self.i += 1
                op = "/" if tok == ("sym", "/") else "*"
                left = self.node(op, left, self.unary())
            elif self._starts_atom(tok):
                left = self.node("*", left, self.power())  # implicit product: 2x, 3\pi
            else:
                break
        return left

    def unary(self) -> Node:
        tok = self.peek()
        if tok in (("sym", "-"), ("sym", "+")):
            self.i += 1
            inner = self.unary()
            return self.node("neg", inner) if tok[1] == "-" else inner
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        if self.peek() == ("sym", "^"):
            self.i += 1
            return self.node("^", base, self.unary())
        return base

    @staticmethod
    def _starts_atom(tok) -> bool:
        kind, text = tok
        return kind in ("num", "var") or (kind == "sym" and text in "({[") or (
            kind == "cmd" and (text in _FUNCS or text in _CONSTS or text in ("frac", "dfrac", "tfrac"))
        )

    def group(self) -> Node:
        tok = self.peek()
        if tok == ("sym", "{"):
            self.i += 1
            inner = self.expr()
            self.take("sym", "}")
            return inner
        if tok is not None and tok[0] == "num" and len(tok[1]) > 1 and tok[1].isdigit():
            # \frac12 means \frac{1}{2}: a bare digit string feeds one digit per group
            self.tokens[self.i] = ("num", tok[1][1:])
            return self.node("num", value=float(tok[1][0]))
        return self.atom()

    def atom(self) -> Node:
        tok = self.peek()
        if tok is None:
            raise ExprError("unexpected end")
        kind, text = tok
        self.i += 1
        if kind == "num":
            return self.node("num", value=float(text))
        if kind == "var":
            return self.node("var", name=text)
        if kind == "sym" and text in "({[":
            inner = self.expr()
            self.take("sym", {"(": ")", "{": "}", "[": "]"}[text])
            return inner
        if kind == "cmd":
            return self.command(text)
        raise ExprError(f"unexpected {tok}")

    def command(self, name: str) -> Node:
        if name in ("frac", "dfrac", "tfrac"):
            return self.node("/", self.group(), self.group())
        if name in _CONSTS:
            return self.node("num", value=_CONSTS[name])
        if name == "sqrt" and self.peek() == ("sym", "["):
            self.i += 1
            degree = self.expr()
            self.take("sym", "]")
            return self.node("root", self.group(), degree)
        if name in _FUNCS:
            return self.node("call", self.group(), name=name)
        raise ExprError(f"unsupported command \\{name}")


def parse(text: str, *, deadline: float | None = None) -> Node:
    """Parse ``text`` into a tree; raises :class:`ExprError` for anything else."""
    if len(text) > MAX_CHARS:
        raise ExprError(f"longer than {MAX_CHARS} characters")
    limit = time.monotonic() + 0.05 if deadline is None else deadline
    return _Parser(_tokens(text), limit).parse()


def variables(tree: Node) -> set[str]:
    if tree.op == "var":
        return {tree.name}
    return set().union(*(variables(a) for a in tree.args)) if tree.args else set()


def evaluate(tree: Node, env: dict[str, float]) -> float:
    """Evaluate with floats; overflow gives inf, domain errors give NaN."""
    try:
        return _eval(tree, env)
    except OverflowError:
        return math.inf
    except (ValueError, ZeroDivisionError):
        return math.nan


def _eval(t: Node, env: dict[str, float]) -> float:
    if t.op == "num":
        return t.value
    if t.op == "var":
        return env[t.name]
    if t.op == "neg":
        return -_eval(t.args[0], env)
    if t.op == "call":
        return float(_FUNCS[t.name](_eval(t.args[0], env)))
    a, b = (_eval(x, env) for x in t.args)
    if t.op == "+":
        return a + b
    if t.op == "-":
        return a - b
    if t.op == "*":
        return a * b
    if t.op == "/":
        return a / b
    if t.op == "root":
        return _pow(a, 1.0 / b)
    return _pow(a, b)


def _pow(a: float, b: float) -> float:
    if a < 0 and not float(b).is_integer():
        return math.nan  # no complex results
    result = math.pow(a, b)
    return result if not isinstance(result, complex) else math.nan
