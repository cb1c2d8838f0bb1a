"""Answer equivalence with a bounded cascade (no ``eval``, no sympy on model text).

Cascade, after :func:`normalize_answer` on both sides:

1. string equality;
2. multiple-choice letters (``(C)``, ``C``, ``\\text{C}``);
3. words (four or more letters and nothing else, e.g. ``\\text{East}``): equal when
   equal ignoring case, never compared as products of variables (``east`` is not
   ``seat``);
4. numerals with a base subscript (``4210_{5}``, ``4210_5``): the digits must agree, and
   the bases when both sides give one (the question fixes the base);
5. matrices (``pmatrix``, ``bmatrix``, ``Bmatrix``, ``matrix``; ``vmatrix``/``Vmatrix``
   only with their own kind), cell by cell, same shape;
6. tuples and intervals, element by element (bracket kinds must agree); a bare list
   (``1, -2``, the solutions of an equation) in any order, never equal to a bracketed one;
7. numbers, relative tolerance 1e-4 (``50%`` also matches ``0.5`` when one side
   carried a percent sign);
8. symbolic equality: both sides parsed by the restricted parser of ``_mathexpr`` and
   evaluated at fixed pseudo-random points of their variables.

Each comparison runs under a deadline (default 100 ms) and size limits; when a limit
is hit or a side cannot be parsed, the verdict is ``UNKNOWN``, which
:func:`equivalent` reports as not equivalent. Empty answers are never equivalent to
anything, themselves included.
"""

from __future__ import annotations

import enum
import functools
import math
import random
import re
import time
from collections.abc import Iterable

from reasonserve.certainindex import _mathexpr as mx
from reasonserve.certainindex.answers import MAX_ANSWER_CHARS, normalize_answer
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["AnswerClasses", "Verdict", "compare_answers", "equivalent", "group_answers"]

REL_TOL = 1e-4
_SYMBOLIC_POINTS = 6
_MC = re.compile(r"^\(?([A-Ea-e])\)?$")
_BRACKETS = {"(": ")", "[": "]"}
_WORD = re.compile(r"^[A-Za-z]{4,}$")
_BASE_NUMERAL = re.compile(r"^([0-9A-Z]+)(?:_\{?(\d{1,2})\}?)?$")
_MATRIX = re.compile(r"^\\begin\{([pbBvV]?matrix)\}(.*)\\end\{\1\}$", re.DOTALL)
_PLAIN_MATRIX_KINDS = {"matrix", "pmatrix", "bmatrix", "Bmatrix"}


class Verdict(enum.Enum):
    EQUAL = "equal"
    DIFFERENT = "different"
    UNKNOWN = "unknown"


def equivalent(a: str | None, b: str | None, *, time_limit_s: float = 0.1) -> bool:
    """Whether two answers are mathematically the same (``UNKNOWN`` counts as no)."""
    return compare_answers(a, b, time_limit_s=time_limit_s) is Verdict.EQUAL


def compare_answers(a: str | None, b: str | None, *, time_limit_s: float = 0.1) -> Verdict:
    """Compare two raw answers; see the module docstring for the cascade."""
    if not isinstance(time_limit_s, (int, float)) or not time_limit_s > 0:
        raise InvalidArgumentError(f"time_limit_s must be > 0, got {time_limit_s!r}")
    if not isinstance(a, (str, type(None))) or not isinstance(b, (str, type(None))):
        raise InvalidArgumentError("answers must be str or None")
    na, nb = normalize_answer(a), normalize_answer(b)
    if not na or not nb:
        return Verdict.DIFFERENT
    if na == nb:
        return Verdict.EQUAL
    if len(na) > MAX_ANSWER_CHARS or len(nb) > MAX_ANSWER_CHARS:
        return Verdict.UNKNOWN
    percent = "%" in (a or "") or "%" in (b or "")
    return _compare(na, nb, time.monotonic() + time_limit_s, percent)


def _compare(na: str, nb: str, deadline: float, percent: bool) -> Verdict:
    if na == nb:
        return Verdict.EQUAL
    ma, mb = _MC.match(na), _MC.match(nb)
    if ma or mb:
        if ma and mb:
            return Verdict.EQUAL if ma.group(1).upper() == mb.group(1).upper() else Verdict.DIFFERENT
        return Verdict.DIFFERENT
    wa, wb = _WORD.match(na), _WORD.match(nb)
    if wa or wb:
        return Verdict.EQUAL if wa and wb and na.casefold() == nb.casefold() else Verdict.DIFFERENT
    if "_" in na or "_" in nb:
        based = _compare_base_numerals(na, nb)
        if based is not None:
            return based
    xa, xb = _MATRIX.match(na), _MATRIX.match(nb)
    if xa or xb:
        return _compare_matrices(xa, xb, deadline, percent)
    la, lb = _split_list(na), _split_list(nb)
    if la is not None or lb is not None:
        return _compare_lists(la, lb, deadline, percent)
    if "=" in na or "=" in nb:
        return _compare_equations(na, nb, deadline, percent)
    return _compare_values(na, nb, deadline, percent)


def _compare_base_numerals(na: str, nb: str) -> Verdict | None:
    """``4210_{5}`` against ``4210_5`` or ``4210``; None when the rule does not apply."""
    ma, mb = _BASE_NUMERAL.match(na), _BASE_NUMERAL.match(nb)
    if not (ma and mb) or (ma.group(2) is None and mb.group(2) is None):
        return None
    if not all(_valid_numeral(m.group(1), m.group(2)) for m in (ma, mb)):
        return None
    same_base = ma.group(2) is None or mb.group(2) is None or int(ma.group(2)) == int(mb.group(2))
    return Verdict.EQUAL if same_base and ma.group(1) == mb.group(1) else Verdict.DIFFERENT


def _valid_numeral(digits: str, base: str | None) -> bool:
    if base is None:
        return True
    b = int(base)
    return 2 <= b <= 36 and all(int(d, 36) < b for d in digits)


def _matrix_cells(body: str) -> list[list[str]]:
    rows = body.split("\\\\")
    if rows and rows[-1] == "":  # a trailing row break
        rows.pop()
    return [row.split("&") for row in rows]


def _compare_matrices(xa, xb, deadline: float, percent: bool) -> Verdict:
    if xa is None or xb is None:
        return Verdict.DIFFERENT
    ka, kb = xa.group(1), xb.group(1)
    if ka != kb and not (ka in _PLAIN_MATRIX_KINDS and kb in _PLAIN_MATRIX_KINDS):
        return Verdict.DIFFERENT
    ca, cb = _matrix_cells(xa.group(2)), _matrix_cells(xb.group(2))
    if [len(r) for r in ca] != [len(r) for r in cb]:
        return Verdict.DIFFERENT
    verdicts = [
        _compare(x, y, deadline, percent) if x and y else Verdict.UNKNOWN
        for ra, rb in zip(ca, cb, strict=True)
        for x, y in zip(ra, rb, strict=True)
    ]
    return _all_equal(verdicts)


def _all_equal(verdicts: list[Verdict]) -> Verdict:
    if all(v is Verdict.EQUAL for v in verdicts):
        return Verdict.EQUAL
    return Verdict.UNKNOWN if Verdict.UNKNOWN in verdicts else Verdict.DIFFERENT


def _split_list(s: str) -> tuple[str, str, list[str]] | None:
    """``(a,b]`` -> ("(", "]", ["a", "b"]); a bare ``a,b`` -> ("", "", [...]); else None."""
    opener, closer = "", ""
    body = s
    if len(s) >= 2 and s[0] in _BRACKETS and s[-1] in ")]":
        opener, closer, body = s[0], s[-1], s[1:-1]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth < 0:
                return None  # "(1)+(2)" is not a tuple
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    if not parts:
        return None
    parts.append(body[start:])
    return opener, closer, parts


def _compare_lists(la, lb, deadline: float, percent: bool) -> Verdict:
    if la is None or lb is None:
        return Verdict.DIFFERENT
    (oa, ca, pa), (ob, cb, pb) = la, lb
    if len(pa) != len(pb) or ((oa, ca) != (ob, cb) and (oa or ob)):
        return Verdict.DIFFERENT
    ordered = _all_equal([_compare(x, y, deadline, percent) for x, y in zip(pa, pb, strict=True)])
    if ordered is Verdict.EQUAL or oa:
        return ordered
    return _compare_unordered(pa, pb, deadline, percent)


def _compare_unordered(pa: list[str], pb: list[str], deadline: float, percent: bool) -> Verdict:
    """A bare list (``1, -2``: the solutions of an equation) matches in any order."""
    if sorted(pa) == sorted(pb):  # same strings reordered: no pairwise checks needed
        return Verdict.EQUAL
    left, unknown = list(pb), False
    for x in pa:
        for j, y in enumerate(left):
            if time.monotonic() > deadline:
                return Verdict.UNKNOWN
            verdict = _compare(x, y, deadline, percent)
            if verdict is Verdict.EQUAL:
                del left[j]
                break
            unknown = unknown or verdict is Verdict.UNKNOWN
        else:
            return Verdict.UNKNOWN if unknown else Verdict.DIFFERENT
    return Verdict.EQUAL


def _compare_equations(na: str, nb: str, deadline: float, percent: bool) -> Verdict:
    sa, sb = na.split("="), nb.split("=")
    if len(sa) != 2 or len(sb) != 2:
        return Verdict.UNKNOWN
    left = _compare(sa[0], sb[0], deadline, percent)
    right = _compare(sa[1], sb[1], deadline, percent)
    if left is Verdict.EQUAL and right is Verdict.EQUAL:
        return Verdict.EQUAL
    return Verdict.UNKNOWN if Verdict.UNKNOWN in (left, right) else Verdict.DIFFERENT


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> mx.Node | None:
    """Parse once per distinct normalized answer (memoized: parsing is pure)."""
    try:
        return mx.parse(text, deadline=time.monotonic() + 0.05)
    except (mx.ExprError, RecursionError, ValueError):
        return None


def _close(x: float, y: float) -> bool:
    if math.isinf(x) or math.isinf(y):
        return x == y
    return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=1e-9)


def _compare_values(na: str, nb: str, deadline: float, percent: bool) -> Verdict:
    ta, tb = _parsed(na), _parsed(nb)
    if ta is None or tb is None or time.monotonic() > deadline:
        return Verdict.UNKNOWN
    names = sorted(mx.variables(ta) | mx.variables(tb))
    if not names:
        x, y = mx.evaluate(ta, {}), mx.evaluate(tb, {})
        if math.isnan(x) or math.isnan(y):
            return Verdict.UNKNOWN
        scales = (1.0, 100.0, 0.01) if percent else (1.0,)
        return Verdict.EQUAL if any(_close(x, y * s) for s in scales) else Verdict.DIFFERENT
    return _compare_symbolic(ta, tb, names, deadline)


def _compare_symbolic(ta: mx.Node, tb: mx.Node, names: list[str], deadline: float) -> Verdict:
    rng = random.Random(len(names) * 1_000_003 + 17)  # fixed points: same verdict every run
    agreeing = 0
    for _ in range(_SYMBOLIC_POINTS):
        if time.monotonic() > deadline:
            return Verdict.UNKNOWN
        env = {n: rng.uniform(0.3, 2.7) for n in names}
        x, y = mx.evaluate(ta, env), mx.evaluate(tb, env)
        if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
            continue
        if not math.isclose(x, y, rel_tol=1e-7, abs_tol=1e-10):
            return Verdict.DIFFERENT
        agreeing += 1
    return Verdict.EQUAL if agreeing >= 3 else Verdict.UNKNOWN


class AnswerClasses:
    """Incremental grouping of answers into equivalence classes.

    ``add(answer)`` returns the class id (0, 1, ...) of the answer, or -1 for an empty
    or missing answer. A new answer is compared with one representative per class;
    normalized strings seen before are looked up without comparing.
    """

    def __init__(self, *, time_limit_s: float = 0.1) -> None:
        self._time_limit_s = time_limit_s
        self._ids: dict[str, int] = {}
        self._representatives: list[str] = []

    def __len__(self) -> int:
        return len(self._representatives)

    def add(self, answer: str | None) -> int:
        key = normalize_answer(answer)
        if not key:
            return -1
        if key in self._ids:
            return self._ids[key]
        for cid, rep in enumerate(self._representatives):
            if equivalent(rep, key, time_limit_s=self._time_limit_s):
                self._ids[key] = cid
                return cid
        self._representatives.append(key)
        self._ids[key] = len(self._representatives) - 1
        return self._ids[key]

    def representative(self, class_id: int) -> str:
        return self._representatives[class_id]


def group_answers(answers: Iterable[str | None], *, time_limit_s: float = 0.1) -> list[int]:
    """Class id per answer (-1 for empty ones), ids numbered in order of first appearance."""
    classes = AnswerClasses(time_limit_s=time_limit_s)
    return [classes.add(a) for a in answers]
