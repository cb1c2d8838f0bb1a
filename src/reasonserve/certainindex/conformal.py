"""Risk-controlled thresholds: Clopper-Pearson bounds and fixed-sequence testing.

An early-exit rule with a threshold ``t`` changes each calibration program's outcome:
it *harms* a program whose full run is right but whose exit answer is wrong, and
*gains* one whose full run is wrong but whose exit answer is right. The accuracy loss
is ``harm rate - gain rate``. :func:`choose_threshold` walks the thresholds from the
most conservative to the most aggressive and keeps going while

    upper_CP(harms, n, delta / 2) - lower_CP(gains, n, delta / 2) <= tolerance,

returning the last threshold that passed (Learn-then-Test with fixed-sequence
testing, Angelopoulos et al. 2021): if the calibration programs are exchangeable with
the programs the rule is used on, the chosen threshold's accuracy loss exceeds
``tolerance`` with probability at most ``delta``. No monotonicity of the loss in the
threshold is needed. Across models the programs are *not* exchangeable; the
replay measures what the bound is worth there (leave one model out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["MAX_N", "ThresholdRisk", "choose_threshold", "clopper_pearson_lower", "clopper_pearson_upper"]


MAX_N = 1_000_000  # the exact sums cost O(n) per evaluation: larger calibration sets are refused


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (``n <= MAX_N``)."""
    if n > MAX_N:
        raise InvalidArgumentError(f"n = {n} is over the exact bound's limit of {MAX_N} programs")
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    i = np.arange(1, k + 1, dtype=np.float64)
    log_choose = np.concatenate([[0.0], np.cumsum(np.log(n - i + 1) - np.log(i))])  # log C(n, 0..k)
    j = np.arange(k + 1, dtype=np.float64)
    logs = log_choose + j * math.log(p) + (n - j) * math.log1p(-p)
    top = float(logs.max())
    return min(1.0, math.exp(top) * float(np.exp(logs - top).sum()))


def _check(k: int, n: int, delta: float) -> None:
    if not (isinstance(n, int) and isinstance(k, int) and 0 <= k <= n and n >= 1):
        raise InvalidArgumentError(f"need integers 0 <= k <= n, n >= 1; got k={k!r}, n={n!r}")
    if n > MAX_N:
        raise InvalidArgumentError(f"n = {n} is over the exact bound's limit of {MAX_N} (use a sample)")
    if not 0 < delta < 1:
        raise InvalidArgumentError(f"delta must lie in (0, 1), got {delta!r}")


def clopper_pearson_upper(k: int, n: int, delta: float) -> float:
    """The exact one-sided upper ``1 - delta`` confidence bound on a rate from ``k`` of ``n``."""
    _check(k, n, delta)
    if k == n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):  # P(X <= k | p) falls as p grows: find where it reaches delta
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _binom_cdf(k, n, mid) > delta else (lo, mid)
    return hi


def clopper_pearson_lower(k: int, n: int, delta: float) -> float:
    """The exact one-sided lower ``1 - delta`` confidence bound on a rate from ``k`` of ``n``."""
    _check(k, n, delta)
    if k == 0:
        return 0.0
    lo, hi = 0.0, k / n
    for _ in range(60):  # P(X >= k | p) = 1 - P(X <= k - 1 | p) grows with p: find where it reaches delta
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1.0 - _binom_cdf(k - 1, n, mid) < delta else (lo, mid)
    return lo


@dataclass(frozen=True, slots=True)
class ThresholdRisk:
    """One threshold's counts over ``n`` calibration programs."""

    threshold: float
    harms: int
    gains: int
    n: int

    def bound(self, delta: float) -> float:
        """Upper confidence bound on the accuracy loss (harm rate minus gain rate)."""
        return clopper_pearson_upper(self.harms, self.n, delta / 2) - clopper_pearson_lower(
            self.gains, self.n, delta / 2)  # fmt: skip


def choose_threshold(
    risks: Sequence[ThresholdRisk], tolerance: float, delta: float = 0.1
) -> ThresholdRisk | None:
    """The last threshold, in the given order (conservative first), of the passing prefix.

    ``None`` when even the first fails: the rule must never exit early.
    """
    if not 0 <= tolerance <= 1:
        raise InvalidArgumentError(f"tolerance must lie in [0, 1], got {tolerance!r}")
    chosen = None
    for risk in risks:
        if risk.bound(delta) > tolerance:
            break
        chosen = risk
    return chosen
