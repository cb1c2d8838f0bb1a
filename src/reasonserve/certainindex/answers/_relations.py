"""Equations and inequalities: ``x < 5``, ``2x+4y-3=0``, ``-2 <= x <= 7``.

A relation ``l op r`` is read as ``l - r op 0`` with ``>``/``>=`` flipped to ``<``/``<=``,
so ``-x > -1`` is ``x < 1``. Two equations are equal when their differences are
proportional (``x^2/4 + y^2/3 = 1`` is ``x^2/16 + y^2/12 = 1/4``), two inequalities when
the factor is positive. A chain ``a < x <= b`` with constant ends is the interval
``(a, b]``, and ``x > 5`` is ``(5, \\infty)``, so both compare with intervals.
"""

from __future__ import annotations

import re

from reasonserve.certainindex.answers import _mathexpr as mx
from reasonserve.certainindex.answers._structures import split_parts, top_level_split
from reasonserve.certainindex.answers._values import parsed, proportional
from reasonserve.certainindex.answers._verdict import Compare, Verdict, all_equal
from reasonserve.certainindex.answers._work import Work

_OPERATOR = re.compile(r"<=|>=|!=|<|>|=")
# "x", "abc", "a_{37}", "(p,q)", "f(x)", "P(4)", "|AB|": a name whose value an answer may state
_NAME = re.compile(
    r"^(?:[a-zA-Z]{1,3}(?:_\{?[a-zA-Z0-9]{1,6}\}?)?|\([a-z](?:,[a-z]){1,3}\)|[a-zA-Z]\(-?[a-z0-9]{1,4}\)|\|[A-Z]{1,3}\|)$"
)
_FLIP = {">": "<", ">=": "<="}
_OPEN = {"<": "(", "<=": "["}
_CLOSE = {"<": ")", "<=": "]"}


def split_relation(s: str) -> tuple[list[str], list[str]] | None:
    """``a<b<=c`` -> (["a", "b", "c"], ["<", "<="]) at bracket depth 0; None without relation."""
    split = top_level_split(s, _OPERATOR) if any(ch in s for ch in "<>=") else None
    if split is None or not split[1] or not all(split[0]):
        return None
    return split


def assigned_value(s: str) -> str | None:
    """The value an equation states, else None.

    ``x = 5`` -> ``5`` and ``x = 2+3 = 5`` -> ``5`` (a name assigned: the chain's last
    value); ``657+64 = 721`` -> ``721`` (a computation between constants: its result).
    """
    split = split_relation(s)
    if split is None or any(op != "=" for op in split[1]):
        return None
    if not (_NAME.match(split[0][0]) or all(_is_constant(part) for part in split[0])):
        return None
    if any(len(split_parts(part, ",") or ()) > 1 for part in split[0]):
        return None  # "a = 4, b = 5": a list of assignments
    return split[0][-1]


def _ascending(parts: list[str], ops: list[str]) -> tuple[list[str], list[str]]:
    """Write a chain with ``<``/``<=``/``=``/``!=`` only (``a > b`` -> ``b < a``)."""
    if all(op in _FLIP for op in ops):
        return parts[::-1], [_FLIP[op] for op in reversed(ops)]
    return parts, ops


def _is_constant(text: str) -> bool:
    tree = parsed(text)
    return tree is not None and not mx.variables(tree)


def as_interval(s: str) -> str | None:
    """``-2<=x<=7`` -> ``[-2,7]``; ``x>5`` -> ``(5,\\infty)``; None when not of that shape."""
    split = split_relation(s)
    if split is None:
        return None
    parts, ops = _ascending(*split)
    if len(ops) == 2 and all(op in _OPEN for op in ops):
        lo, mid, hi = parts
        if _is_constant(lo) and _is_constant(hi) and not _is_constant(mid):
            return f"{_OPEN[ops[0]]}{lo},{hi}{_CLOSE[ops[1]]}"
    if len(ops) == 1 and ops[0] in _OPEN:
        (left, right), op = parts, ops[0]
        if _is_constant(right) and not _is_constant(left):  # x < b
            return f"(-\\infty,{right}{_CLOSE[op]}"
        if _is_constant(left) and not _is_constant(right):  # a < x
            return f"{_OPEN[op]}{left},\\infty)"
    return None


def compare_relations(na: str, nb: str, cmp: Compare, work: Work) -> Verdict:
    """Both sides relations (same shape), or one a relation the other an interval."""
    ra, rb = split_relation(na), split_relation(nb)
    if ra is None or rb is None:
        interval = as_interval(na if ra is not None else nb)
        other = nb if ra is not None else na
        return cmp(interval, other) if interval is not None and other[:1] in "([" else Verdict.DIFFERENT
    (pa, oa), (pb, ob) = _ascending(*ra), _ascending(*rb)
    if oa != ob or len(pa) != len(pb):
        if len(oa) == 1 and len(ob) == 1 and {oa[0], ob[0]} <= {"<", "<="} | {"=", "!="}:
            return Verdict.DIFFERENT
        return _chain_intervals(na, nb, cmp)
    if len(oa) == 1:
        return _compare_single(pa, pb, oa[0], cmp, work)
    return all_equal(cmp(x, y) for x, y in zip(pa, pb, strict=True))


def _chain_intervals(na: str, nb: str, cmp: Compare) -> Verdict:
    ia, ib = as_interval(na), as_interval(nb)
    return cmp(ia, ib) if ia is not None and ib is not None else Verdict.DIFFERENT


def _compare_single(pa: list[str], pb: list[str], op: str, cmp: Compare, work: Work) -> Verdict:
    if cmp(pa[0], pb[0]) is Verdict.EQUAL and cmp(pa[1], pb[1]) is Verdict.EQUAL:
        return Verdict.EQUAL
    if op in ("=", "!=") and cmp(pa[0], pb[1]) is Verdict.EQUAL and cmp(pa[1], pb[0]) is Verdict.EQUAL:
        return Verdict.EQUAL
    trees = [parsed(f"({p[0]})-({p[1]})") for p in (pa, pb)]
    if trees[0] is None or trees[1] is None:
        return Verdict.UNKNOWN
    if not (mx.variables(trees[0]) or mx.variables(trees[1])):
        return Verdict.DIFFERENT
    return proportional(trees[0], trees[1], work, positive=op not in ("=", "!="))
