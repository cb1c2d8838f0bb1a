"""Answer equivalence with a bounded cascade (no ``eval``, no sympy on model text).

Cascade, after :func:`normalize_answer` on both sides (first rule that applies):

1. string equality;
2. multiple-choice letters (``(C)``, ``C``, ``\\text{C}``);
3. words (four or more letters and nothing else, e.g. ``\\text{East}``): equal when
   equal ignoring case, never compared as products of variables;
4. numerals with a base subscript (``4210_{5}``, ``4210_5``): the digits must agree, and
   the bases when both sides give one (the question fixes the base);
5. matrices, lists, tuples, intervals, unions and ``\\pm`` (:mod:`._structures`);
6. equations and inequalities (:mod:`._relations`); an assignment (``x = 5``,
   ``abc = -120``, ``(p,q) = (3,2)``) or a computation between constants
   (``657+64 = 721``) against a plain answer compares its value;
7. numbers and expressions (:mod:`._values`): exact for rationals, rounded decimals to
   their own precision, floats with 1e-9 relative tolerance for irrational values,
   pseudo-random points for expressions with variables (``50%`` also matches ``0.5``
   when one side carried a percent).

Each comparison runs within a work budget of :data:`MAX_STEPS` counted steps (one per
recursive step, a tree's node count per evaluation; :mod:`._work`) and size limits, never
a clock, so a verdict is the same on every machine and under any load. When a limit is
hit, a value is too large, or a side cannot be parsed, the verdict is ``UNKNOWN``,
which :func:`equivalent` reports as not equivalent. Empty answers are never equivalent
to anything, themselves included. No signals are used: comparisons are thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from reasonserve.certainindex.answers._normalize import has_percent
from reasonserve.certainindex.answers._relations import assigned_value, compare_relations, split_relation
from reasonserve.certainindex.answers._structures import MATRIX, compare_items, compare_matrices, split_items
from reasonserve.certainindex.answers._values import compare_values
from reasonserve.certainindex.answers._values import parsed as _parsed  # noqa: F401 - benchmarks clear its cache
from reasonserve.certainindex.answers._verdict import Verdict
from reasonserve.certainindex.answers._work import Work
from reasonserve.certainindex.answers.extract import MAX_ANSWER_CHARS, normalize_answer
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["MAX_STEPS", "AnswerClasses", "Verdict", "compare_answers", "equivalent", "group_answers"]

#: Steps one comparison may take (see :mod:`._work`). Loading the 21 probe recordings runs
#: 572,144 comparisons; the longest takes 677 steps. 20,000 steps are milliseconds of Python.
MAX_STEPS = 20_000

_INTEGER = re.compile(r"-?[0-9]{1,300}")
_MC = re.compile(r"^\(?([A-Ea-e])\)?$")
_WORD = re.compile(r"^[A-Za-z]{4,}$")
_BASE_NUMERAL = re.compile(r"^([0-9A-Z]+)(?:_\{?(\d{1,2})\}?)?$")


def equivalent(a: str | None, b: str | None, *, max_steps: int = MAX_STEPS) -> bool:
    """Whether two answers are mathematically the same (``UNKNOWN`` counts as no)."""
    return compare_answers(a, b, max_steps=max_steps) is Verdict.EQUAL


def compare_answers(a: str | None, b: str | None, *, max_steps: int = MAX_STEPS) -> Verdict:
    """Compare two raw answers; see the module docstring for the cascade.

    ``max_steps`` bounds the work (:data:`MAX_STEPS`); a comparison that needs more is
    ``UNKNOWN``, on every machine alike.
    """
    _check_steps(max_steps)
    if not isinstance(a, (str, type(None))) or not isinstance(b, (str, type(None))):
        raise InvalidArgumentError("answers must be str or None")
    na, nb = normalize_answer(a), normalize_answer(b)
    if not na or not nb:
        return Verdict.DIFFERENT
    if na == nb:
        return Verdict.EQUAL
    if len(na) > MAX_ANSWER_CHARS or len(nb) > MAX_ANSWER_CHARS:
        return Verdict.UNKNOWN
    percent = has_percent(a or "") or has_percent(b or "")
    return _Cascade(Work(max_steps), percent).compare(na, nb)


def _check_steps(max_steps: int) -> None:
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise InvalidArgumentError(f"max_steps must be an integer >= 1, got {max_steps!r}")


class _Cascade:
    """One comparison's work budget and percent flag, shared by its recursive steps."""

    def __init__(self, work: Work, percent: bool) -> None:
        self.work, self.percent = work, percent

    def compare(self, na: str, nb: str) -> Verdict:
        if na == nb:
            return Verdict.EQUAL
        if not self.work.spend(1):
            return Verdict.UNKNOWN
        if not self.percent and _INTEGER.fullmatch(na) and _INTEGER.fullmatch(nb):
            return Verdict.EQUAL if int(na) == int(nb) else Verdict.DIFFERENT  # the common case
        value = _one_sided_assignment(na, nb)
        if value is not None:
            return self.compare(*value)
        for rule in (_compare_letters, _compare_words, _compare_base_numerals):
            verdict = rule(na, nb)
            if verdict is not None:
                return verdict
        xa, xb = MATRIX.match(na), MATRIX.match(nb)
        if xa or xb:
            return compare_matrices(xa, xb, self.compare)
        la, lb = split_items(na), split_items(nb)
        if la is not None or lb is not None:
            return self._compare_items_or_relation(na, nb, la, lb)
        if split_relation(na) is not None or split_relation(nb) is not None:
            return compare_relations(na, nb, self.compare, self.work)
        return compare_values(na, nb, self.work, self.percent)

    def _compare_items_or_relation(self, na, nb, la, lb) -> Verdict:
        """``x > 5`` against ``(5, \\infty)``: a relation on one side reads as an interval."""
        if (la is None and split_relation(na)) or (lb is None and split_relation(nb)):
            return compare_relations(na, nb, self.compare, self.work)
        return compare_items(la, lb, self.compare, self.work)


def _one_sided_assignment(na: str, nb: str) -> tuple[str, str] | None:
    """``x = 5`` against ``5``: the assigned value; ``x = 2+3 = 5`` against ``x = 5``: the values."""
    va = assigned_value(na) if "=" in na else None
    vb = assigned_value(nb) if "=" in nb else None
    if va is not None and vb is not None:  # the same name on both sides: compare the values
        same_name = na.split("=", 1)[0] == nb.split("=", 1)[0]
        return (va, vb) if same_name and (va, vb) != (na, nb) else None
    if va is not None and vb is None and split_relation(nb) is None:
        return va, nb
    if vb is not None and va is None and split_relation(na) is None:
        return na, vb
    return None


def _compare_letters(na: str, nb: str) -> Verdict | None:
    ma, mb = _MC.match(na), _MC.match(nb)
    if not (ma or mb):
        return None
    if ma and mb:
        return Verdict.EQUAL if ma.group(1).upper() == mb.group(1).upper() else Verdict.DIFFERENT
    return Verdict.DIFFERENT


def _compare_words(na: str, nb: str) -> Verdict | None:
    wa, wb = _WORD.match(na), _WORD.match(nb)
    if not (wa or wb):
        return None
    return Verdict.EQUAL if wa and wb and na.casefold() == nb.casefold() else Verdict.DIFFERENT


def _compare_base_numerals(na: str, nb: str) -> Verdict | None:
    """``4210_{5}`` against ``4210_5`` or ``4210``; None when the rule does not apply."""
    if "_" not in na and "_" not in nb:
        return None
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


class AnswerClasses:
    """Incremental grouping of answers into equivalence classes.

    ``add(answer)`` returns the class id (0, 1, ...) of the answer, or -1 for an empty
    or missing answer. A new answer is compared with one representative per class;
    normalized strings seen before are looked up without comparing. ``max_compared``
    bounds the cost of a new answer for incremental users (early-exit rules): it is
    compared with the representatives of the latest ``max_compared`` classes only
    (``None``: all), so an answer equivalent only to an older class, in a different
    spelling, opens a new class.
    """

    def __init__(self, *, max_steps: int = MAX_STEPS, max_compared: int | None = None) -> None:
        _check_steps(max_steps)
        if max_compared is not None and (isinstance(max_compared, bool) or not isinstance(max_compared, int)
                                         or max_compared < 1):  # fmt: skip
            raise InvalidArgumentError(f"max_compared must be an integer >= 1 or None, got {max_compared!r}")
        self._max_steps = max_steps
        self._max_compared = max_compared
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
        n = len(self._representatives)
        first = 0 if self._max_compared is None else max(0, n - self._max_compared)
        for cid in range(first, n):
            if equivalent(self._representatives[cid], key, max_steps=self._max_steps):
                self._ids[key] = cid
                return cid
        self._representatives.append(key)
        self._ids[key] = len(self._representatives) - 1
        return self._ids[key]

    def representative(self, class_id: int) -> str:
        return self._representatives[class_id]


def group_answers(answers: Iterable[str | None], *, max_steps: int = MAX_STEPS) -> list[int]:
    """Class id per answer (-1 for empty ones), ids numbered in order of first appearance."""
    classes = AnswerClasses(max_steps=max_steps)
    return [classes.add(a) for a in answers]
