"""Compare two normalized answers as numbers or expressions (no relations, no lists).

Constants compare exactly where both are rational (:func:`._numeric.exact`); a side
written as a decimal with at least :data:`ROUNDED_MIN_PLACES` places is a rounded value
and matches anything that rounds to it at its own precision, capped at 15 significant
digits (``2.6667`` is ``8/3``, ``1.99`` is not ``2``); other irrational values compare
as floats with a relative tolerance of 1e-9. Huge values (:class:`._numeric.Huge`) and undefined ones are
UNKNOWN. Expressions with variables are evaluated at fixed pseudo-random points. Each
evaluation of the two trees costs their node count from the comparison's :class:`Work`.
"""

from __future__ import annotations

import functools
import math
import random
from fractions import Fraction

from reasonserve.certainindex.answers import _mathexpr as mx
from reasonserve.certainindex.answers._numeric import Huge, approx, exact
from reasonserve.certainindex.answers._verdict import Verdict
from reasonserve.certainindex.answers._work import Work

ROUNDED_MIN_PLACES = 2
_SYMBOLIC_POINTS = 6
_PERCENT_SCALES = (Fraction(1), Fraction(100), Fraction(1, 100))


@functools.lru_cache(maxsize=4096)
def parsed(text: str) -> mx.Node | None:
    """Parse once per distinct normalized answer (memoized: parsing is pure)."""
    try:
        return mx.parse(text)
    except (mx.ExprError, RecursionError, ValueError):
        return None


def exact_value(text: str) -> Fraction | None:
    """The exact value of a constant answer (``\\frac{6}{4}`` -> 3/2), else None."""
    tree = parsed(text)
    if tree is None or mx.variables(tree):
        return None
    try:
        return exact(tree)
    except (Huge, ZeroDivisionError, ValueError, OverflowError):
        return None


def decimal_places(tree: mx.Node) -> int | None:
    """Digits after the point when the tree is a decimal literal (``-0.33`` -> 2), else None."""
    while tree.op == "neg":
        tree = tree.args[0]
    if tree.op == "num" and "." in tree.text:
        return len(tree.text) - tree.text.index(".") - 1
    return None


def compare_values(na: str, nb: str, work: Work, percent: bool) -> Verdict:
    ta, tb = parsed(na), parsed(nb)
    if ta is None or tb is None:
        return Verdict.UNKNOWN
    names = sorted(mx.variables(ta) | mx.variables(tb))
    try:
        if not names:
            return _compare_constants(ta, tb, percent) if work.spend(ta.size + tb.size) else Verdict.UNKNOWN
        return compare_symbolic(ta, tb, work)
    except (Huge, ZeroDivisionError, ValueError, OverflowError):
        return Verdict.UNKNOWN


def _compare_constants(ta: mx.Node, tb: mx.Node, percent: bool) -> Verdict:
    xa, xb = exact(ta), exact(tb)
    va: Fraction | float = xa if xa is not None else approx(ta, {})
    vb: Fraction | float = xb if xb is not None else approx(tb, {})
    if any(isinstance(v, float) and math.isnan(v) for v in (va, vb)):
        return Verdict.UNKNOWN
    places = _rounding_places(decimal_places(ta), decimal_places(tb))
    for scale in _PERCENT_SCALES if percent else _PERCENT_SCALES[:1]:
        scaled = vb * scale if isinstance(vb, Fraction) else vb * float(scale)
        if _same_number(va, scaled, places):
            return Verdict.EQUAL
    return Verdict.DIFFERENT


def _rounding_places(da: int | None, db: int | None) -> int | None:
    """The stated precision when exactly one side is a rounded decimal literal."""
    places = da if db is None else db if da is None else None
    return places if places is not None and places >= ROUNDED_MIN_PLACES else None


def _same_number(a: Fraction | float, b: Fraction | float, places: int | None) -> bool:
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        if places is None:
            return a == b
        # stated precision, but no finer than double precision (15 significant digits)
        return abs(a - b) <= max(Fraction(5, 10 ** (places + 1)), max(abs(a), abs(b)) / 10**15)
    fa, fb = float(a), float(b)
    if math.isinf(fa) or math.isinf(fb):
        return fa == fb
    if places is not None:
        return abs(fa - fb) <= 0.5 * 10.0**-places * (1 + 1e-9) + 1e-15 * max(abs(fa), abs(fb))
    return math.isclose(fa, fb, rel_tol=1e-9, abs_tol=1e-12)


def _samples(ta: mx.Node, tb: mx.Node, seed: int, work: Work):
    """``(x, y)`` values of both trees at fixed pseudo-random points (same every run).

    Points where a value is huge or undefined are skipped; ``None`` marks a spent budget.
    """
    names = sorted(mx.variables(ta) | mx.variables(tb))
    rng = random.Random(len(names) * 1_000_003 + seed)
    for _ in range(_SYMBOLIC_POINTS):
        if not work.spend(ta.size + tb.size):
            yield None
            return
        env = {n: rng.uniform(0.3, 2.7) for n in names}
        try:
            x, y = approx(ta, env), approx(tb, env)
        except Huge:
            continue
        if math.isfinite(x) and math.isfinite(y):
            yield x, y


def compare_symbolic(ta: mx.Node, tb: mx.Node, work: Work) -> Verdict:
    """Equal when both trees agree (relative 1e-7) at three or more of the sample points."""
    agreeing = 0
    for sample in _samples(ta, tb, 17, work):
        if sample is None:
            return Verdict.UNKNOWN
        if not math.isclose(*sample, rel_tol=1e-7, abs_tol=1e-10):
            return Verdict.DIFFERENT
        agreeing += 1
    return Verdict.EQUAL if agreeing >= 3 else Verdict.UNKNOWN


def proportional(ta: mx.Node, tb: mx.Node, work: Work, *, positive: bool) -> Verdict:
    """Whether ``ta = c * tb`` for one constant ``c != 0`` (``c > 0`` when ``positive``)."""
    ratios: list[float] = []
    for sample in _samples(ta, tb, 3, work):
        if sample is None:
            return Verdict.UNKNOWN
        x, y = sample
        if abs(y) < 1e-12:
            if abs(x) >= 1e-9:
                return Verdict.DIFFERENT  # y vanishes where x does not
            continue
        ratios.append(x / y)
    if len(ratios) < 3:
        return Verdict.UNKNOWN
    same = all(math.isclose(r, ratios[0], rel_tol=1e-7) for r in ratios) and abs(ratios[0]) > 1e-12
    return Verdict.EQUAL if same and (ratios[0] > 0 or not positive) else Verdict.DIFFERENT
