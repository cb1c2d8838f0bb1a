"""Answer equivalence with a bounded cascade (no ``eval``, no sympy on model text).

Cascade, after :func:`normalize_answer` on both sides:

1. string equality;
2. multiple-choice letters (``(C)``, ``C``, ``\\text{C}``);
3. tuples and intervals, element by element (bracket kinds must agree);
4. numbers, relative tolerance 1e-4 (``50%`` also matches ``0.5`` when one side
   carried a percent sign);
5. symbolic equality: both sides parsed by the restricted parser of ``_mathexpr`` and
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
    la, lb = _split_list(na), _split_list(nb)
    if la is not None or lb is not None:
        return _compare_lists(la, lb, deadline, percent)
    if "=" in na or "=" in nb:
        return _compare_equations(na, nb, deadline, percent)
    return _compare_values(na, nb, deadline, percent)


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
    verdicts = [_compare(x, y, deadline, percent) for x, y in zip(pa, pb, strict=True)]
    if all(v is Verdict.EQUAL for v in verdicts):
        return Verdict.EQUAL
    return Verdict.UNKNOWN if Verdict.UNKNOWN in verdicts else Verdict.DIFFERENT


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
