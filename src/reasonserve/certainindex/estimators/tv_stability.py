"""The total-variation stopping test (Dynasor, App. E, Definition 2).

With the last ``2k`` counted probe answers ``y_{i+1} .. y_{i+2k}``, let
``P^(j, t)`` be the empirical answer distribution of ``y_{i+j+1} .. y_{i+j+t}``. The test
passes when ``TV(P^(0, k), P^(j, k)) <= epsilon`` for every ``1 <= j <= k`` and
``TV(P^(0, k-1), P^(j, k-1)) <= epsilon`` for every ``1 <= j <= k-1``. The certainty
reported is ``1 - max TV`` over those pairs (0 before ``2k`` answers), so the test
passes exactly when the certainty reaches ``1 - epsilon``.

:func:`tv_probe_bound` gives the Lemma 1 number of probes ``k`` for which the
empirical mixtures are within ``epsilon/3`` of the true ones with probability
``1 - delta`` (Azuma-Hoeffding per set of groups, union bound over the ``2**M`` sets
and the ``2k`` windows).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.certainindex._validate import check_threshold
from reasonserve.core.checks import check_int
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["TVStability", "tv_probe_bound"]


def _tv(a: Sequence[int], b: Sequence[int]) -> float:
    ca, cb = Counter(a), Counter(b)
    return 0.5 * sum(abs(ca[g] / len(a) - cb[g] / len(b)) for g in ca.keys() | cb.keys())


@dataclass(frozen=True, slots=True)
class TVStability:
    """TV-distance stability of sliding answer mixtures (see module docstring)."""

    k: int = 4
    epsilon: float = 0.2

    def __post_init__(self) -> None:
        check_int("k", self.k, 1)
        if self.k < 2:
            raise InvalidArgumentError(f"k must be >= 2 (the k-1 mixtures need k-1 >= 1), got {self.k}")
        check_threshold("epsilon", self.epsilon)

    def certainty_of(self, last: Sequence[int]) -> float:
        """``1 - max TV`` over the last ``2k`` counted answers (0 if fewer)."""
        k = self.k
        if len(last) < 2 * k:
            return 0.0
        y = list(last)[-2 * k :]
        worst = 0.0
        for t, shifts in ((k, range(1, k + 1)), (k - 1, range(1, k))):
            base = y[:t]
            for j in shifts:
                worst = max(worst, _tv(base, y[j : j + t]))
        return 1.0 - worst

    def score(self, class_ids: Sequence[int]) -> float:
        return self.certainty_of([c for c in class_ids if c >= 0])

    def start(self) -> deque:
        return deque(maxlen=2 * self.k)

    def update(self, state: deque, class_id: int) -> float:
        """Add one class id (-1 = not counted); returns the certainty. O(k^2)."""
        if class_id >= 0:
            state.append(class_id)
        return self.certainty_of(state)

    def should_stop(self, certainty: float) -> bool:
        return certainty >= 1.0 - self.epsilon


def tv_probe_bound(num_groups: int, epsilon: float, delta: float = 0.05) -> int:
    """Smallest ``k`` with ``2**M * 4k * exp(-2 (k-1) (epsilon/3)**2) <= delta``."""
    check_int("num_groups", num_groups, 1)
    if not 0 < epsilon <= 1 or not 0 < delta < 1:
        raise InvalidArgumentError("epsilon must lie in (0, 1] and delta in (0, 1)")
    k = 2
    while True:
        need = 1 + (num_groups * math.log(2) + math.log(4 * k / delta)) / (2 * (epsilon / 3) ** 2)
        if k >= need:
            return k
        k = math.ceil(need)
