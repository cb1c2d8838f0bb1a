"""A restricted parser for the math in model answers. No ``eval``.

Model output is untrusted, so it is never handed to Python, sympy or any general
parser. This module tokenizes a small LaTeX/ASCII arithmetic language into a tree
(evaluated by :mod:`._numeric`):

``numbers, letters (variables), + - * / ^ !, implicit products (2x, 3\\pi), ( ) { } [ ],
\\frac{a}{b}, a \\over b, \\div, \\cdot, \\times, \\mod, \\binom{n}{k}, \\sqrt{x},
\\sqrt[n]{x}, \\pi, e, \\infty``, the trigonometric, hyperbolic, log and exp functions
(LaTeX or ASCII: ``\\sqrt{66}`` and ``sqrt(66)``), and mixed numbers
(``2\\frac{4}{21}`` is 2 + 4/21 when both parts are integer literals and the fraction
is proper).

Every input is bounded before any work: at most :data:`MAX_CHARS` characters and
:data:`MAX_NODES` tree nodes (parsing is linear in the tokens), so a hostile string can
neither execute anything nor run for long. Each node records its subtree's ``size``:
evaluating a tree costs that many steps of a comparison's budget (:mod:`._work`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CHARS = 400
MAX_NODES = 400
MAX_DEPTH = 40  # bracket nesting; keeps the recursive descent far from Python's stack limit

FUNCS = frozenset(
    (
        "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh",
        "tanh", "ln", "log", "exp", "sqrt", "abs",
    )
)
CONSTS = frozenset(("pi", "infty", "inf", "e"))
_FRACS = frozenset(("frac", "dfrac", "tfrac", "cfrac"))
_BINOMS = frozenset(("binom", "dbinom", "tbinom"))
_TOKEN = re.compile(
    r"(?P<num>\d+\.\d*|\.\d+|\d+)|\\(?P<cmd>[a-zA-Z]+)|(?P<word>[a-zA-Z]+)|(?P<sym>\*\*|[-+*/^(){}\[\]!|])"
)
_KNOWN_COMMANDS = FUNCS | CONSTS | _FRACS | _BINOMS | {"cdot", "times", "div", "mod", "bmod", "over"}
_MULTIPLY = (("sym", "*"), ("cmd", "cdot"), ("cmd", "times"))
_DIVIDE = (("sym", "/"), ("cmd", "div"))
_CLOSER = {"(": ")", "{": "}", "[": "]"}


class ExprError(ValueError):
    """The text is not in the restricted language, or is too big."""


@dataclass(frozen=True, slots=True)
class Node:
    """One tree node. ``op``: num, const, var, neg, + - * / ^ !, mod, binom, call, root."""

    op: str
    args: tuple = ()
    text: str = ""  # the literal for "num", the name for "var", "const" and "call"
    size: int = 1  # nodes in this subtree


def _command_tokens(name: str) -> list[tuple[str, str]]:
    """``\\cotx`` (spaces were removed from ``\\cot x``) -> ``\\cot`` then the letters ``x``."""
    for end in range(len(name) - 1, 1, -1):
        if name[:end] in _KNOWN_COMMANDS:
            return [("cmd", name[:end]), *(("var", ch) for ch in name[end:])]
    return [("cmd", name)]  # unknown: the parser reports it


def _word_tokens(word: str) -> list[tuple[str, str]]:
    """``sqrt`` and ``pi`` are names; any other letter run is a product of letters."""
    if word in FUNCS or word == "pi":
        return [("cmd", word)]
    return [("var", ch) for ch in word]


def tokens(text: str) -> list[tuple[str, str]]:
    out, pos, n = [], 0, len(text)
    while pos < n:
        if text[pos].isspace():
            pos += 1
            continue
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ExprError(f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        if kind == "word":
            out.extend(_word_tokens(m.group(kind)))
        elif kind == "cmd" and m.group(kind) not in _KNOWN_COMMANDS:
            out.extend(_command_tokens(m.group(kind)))
        else:
            value = m.group(kind)
            out.append((kind, "^" if value == "**" else value))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, toks: list[tuple[str, str]]) -> None:
        self.toks, self.i, self.nodes = toks, 0, 0

    def node(self, op: str, *args: Node, text: str = "") -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ExprError("expression too large")
        return Node(op, args, text, 1 + sum(a.size for a in args))

    def peek(self, ahead: int = 0) -> tuple[str, str] | None:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else None

    def take(self, kind: str, text: str) -> None:
        if self.peek() != (kind, text):
            raise ExprError(f"expected {text}, got {self.peek()}")
        self.i += 1

    def parse(self) -> Node:
        tree = self.over()
        if self.peek() is not None:
            raise ExprError(f"unexpected {self.peek()}")
        return tree

    def over(self) -> Node:
        """``a \\over b``: the lowest-precedence division (TeX's)."""
        left = self.expr()
        while self.peek() == ("cmd", "over"):
            self.i += 1
            left = self.node("/", left, self.expr())
        return left

    def expr(self) -> Node:
        left = self.term()
        while (tok := self.peek()) in (("sym", "+"), ("sym", "-")):
            self.i += 1
            left = self.node(tok[1], left, self.term())
        return left

    def term(self) -> Node:
        left = self.unary()
        while (tok := self.peek()) is not None:
            if tok in _MULTIPLY or tok in _DIVIDE or tok in (("cmd", "mod"), ("cmd", "bmod")):
                self.i += 1
                op = "*" if tok in _MULTIPLY else "/" if tok in _DIVIDE else "mod"
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
        base = self.postfix(self.atom())
        if self.peek() == ("sym", "^"):
            self.i += 1
            return self.node("^", base, self.postfix(self.unary()))
        return base

    def postfix(self, base: Node) -> Node:
        while self.peek() == ("sym", "!"):
            self.i += 1
            base = self.node("!", base)
        return base

    @staticmethod
    def _starts_atom(tok: tuple[str, str]) -> bool:
        kind, text = tok
        if kind in ("num", "var"):
            return True
        if kind == "sym":
            return text in "({["
        return kind == "cmd" and (text in FUNCS or text in CONSTS or text in _FRACS or text in _BINOMS)

    def group(self) -> Node:
        """A ``{...}`` argument, or one token (``\\frac12`` means ``\\frac{1}{2}``)."""
        tok = self.peek()
        if tok == ("sym", "{"):
            self.i += 1
            inner = self.over()
            self.take("sym", "}")
            return inner
        if tok is not None and tok[0] == "num" and len(tok[1]) > 1 and tok[1].isdigit():
            self.toks[self.i] = ("num", tok[1][1:])
            return self.node("num", text=tok[1][0])
        return self.atom()

    def atom(self) -> Node:
        tok = self.peek()
        if tok is None:
            raise ExprError("unexpected end")
        kind, text = tok
        self.i += 1
        if kind == "num":
            return self.number(text)
        if kind == "var":
            return self.node("const", text="e") if text == "e" else self.node("var", text=text)
        if kind == "sym" and text in _CLOSER:
            inner = self.over()
            self.take("sym", _CLOSER[text])
            return inner
        if kind == "sym" and text == "|":
            inner = self.expr()
            self.take("sym", "|")
            return self.node("call", inner, text="abs")
        if kind == "cmd":
            return self.command(text)
        raise ExprError(f"unexpected {tok}")

    def number(self, text: str) -> Node:
        """A literal, or a mixed number ``2\\frac{4}{21}`` (integer parts, proper fraction)."""
        whole = self.node("num", text=text)
        mixed = self._mixed_fraction() if text.isdigit() else None
        return whole if mixed is None else self.node("+", whole, self.node("/", *mixed))

    def _mixed_fraction(self) -> tuple[Node, Node] | None:
        toks = self.toks[self.i : self.i + 8]
        if not toks or toks[0][0] != "cmd" or toks[0][1] not in _FRACS:
            return None
        shape = [t[0] if t[0] == "num" else t for t in toks[1:7]]
        if shape != [("sym", "{"), "num", ("sym", "}"), ("sym", "{"), "num", ("sym", "}")]:
            return None
        num, den = toks[2][1], toks[5][1]
        if not (num.isdigit() and den.isdigit() and int(num) < int(den)):
            return None
        self.i += 7
        return self.node("num", text=num), self.node("num", text=den)

    def command(self, name: str) -> Node:
        if name in _FRACS:
            return self.node("/", self.group(), self.group())
        if name in _BINOMS:
            return self.node("binom", self.group(), self.group())
        if name in CONSTS:
            return self.node("const", text=name)
        if name == "sqrt" and self.peek() == ("sym", "["):
            self.i += 1
            degree = self.expr()
            self.take("sym", "]")
            return self.node("root", self.group(), degree)
        if name in FUNCS:
            return self.call(name)
        raise ExprError(f"unsupported command \\{name}")

    def call(self, name: str) -> Node:
        """``\\sin x``, ``\\sin(x+1)``, ``\\sin^2 x`` (the square of the sine)."""
        exponent = None
        if self.peek() == ("sym", "^"):
            self.i += 1
            exponent = self.group()
        result = self.node("call", self.group(), text=name)
        return result if exponent is None else self.node("^", result, exponent)


def parse(text: str) -> Node:
    """Parse ``text`` into a tree; raises :class:`ExprError` for anything else."""
    if len(text) > MAX_CHARS:
        raise ExprError(f"longer than {MAX_CHARS} characters")
    if _nesting(text) > MAX_DEPTH:
        raise ExprError(f"nested deeper than {MAX_DEPTH}")
    return _Parser(tokens(text)).parse()


def _nesting(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch in "({[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")}]":
            depth -= 1
    return deepest


def variables(tree: Node) -> set[str]:
    if tree.op == "var":
        return {tree.text}
    return set().union(*(variables(a) for a in tree.args)) if tree.args else set()
