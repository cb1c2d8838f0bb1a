"""Profiler-guided calibration (Dynasor App. D.2.2) with cross-validation.

Given labelled runs and a list of candidate settings (thresholds, windows, ...),
choose the candidate that saves the most cost while losing at most ``tolerance``
accuracy against the full-compute baseline on the calibration data. With
:func:`cross_validate`, each fold is scored by the candidate chosen on the *other*
folds, so the reported saving is out-of-sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["CrossValidation", "Outcome", "choose", "cross_validate"]

C = TypeVar("C")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outcome:
    """Totals of one replay: correct answers and cost, with the baseline's."""

    n: int
    correct: float
    cost: float
    baseline_correct: float
    baseline_cost: float

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @property
    def baseline_accuracy(self) -> float:
        return self.baseline_correct / self.n if self.n else 0.0

    @property
    def savings(self) -> float:
        """``1 - cost / baseline_cost``."""
        return 1.0 - self.cost / self.baseline_cost if self.baseline_cost else 0.0

    @property
    def accuracy_loss(self) -> float:
        return self.baseline_accuracy - self.accuracy

    def __add__(self, other: Outcome) -> Outcome:
        return Outcome(self.n + other.n, self.correct + other.correct, self.cost + other.cost,
                       self.baseline_correct + other.baseline_correct,
                       self.baseline_cost + other.baseline_cost)  # fmt: skip

    def as_dict(self) -> dict:
        return {"n": self.n, "baseline_accuracy": self.baseline_accuracy, "accuracy": self.accuracy,
                "baseline_cost": self.baseline_cost / max(self.n, 1), "cost": self.cost / max(self.n, 1),
                "savings": self.savings}  # fmt: skip


def choose(
    candidates: Sequence[C],
    evaluate: Callable[[C, Sequence[T]], Outcome],
    items: Sequence[T],
    tolerance: float,
) -> tuple[C, Outcome]:
    """The candidate with the largest savings among those losing ``<= tolerance`` accuracy.

    When none qualifies, the one with the smallest accuracy loss. Ties keep the earlier
    candidate, so order candidates from most to least conservative.
    """
    if not candidates:
        raise InvalidArgumentError("candidates must not be empty")
    if not 0 <= tolerance <= 1:
        raise InvalidArgumentError(f"tolerance must lie in [0, 1], got {tolerance}")
    scored = [(c, evaluate(c, items)) for c in candidates]
    ok = [(c, o) for c, o in scored if o.accuracy_loss <= tolerance + 1e-12]
    if ok:
        return max(ok, key=lambda co: co[1].savings)
    return min(scored, key=lambda co: co[1].accuracy_loss)


@dataclass(frozen=True)
class CrossValidation(Generic[C]):
    """Per fold: the candidate chosen on the other folds and its outcome on this fold."""

    choices: list[C]
    fold_outcomes: list[Outcome]

    @property
    def pooled(self) -> Outcome:
        total = self.fold_outcomes[0]
        for o in self.fold_outcomes[1:]:
            total = total + o
        return total


def cross_validate(
    candidates: Sequence[C],
    evaluate: Callable[[C, Sequence[T]], Outcome],
    folds: Sequence[Sequence[T]],
    tolerance: float,
    progress: Callable[[int, int, str], None] | None = None,
) -> CrossValidation[C]:
    """Leave-one-fold-out calibration; the pooled outcome is out-of-sample.

    ``progress(done, total, what)`` is called after each fold.
    """
    if len(folds) < 2:
        raise InvalidArgumentError(f"need at least 2 folds, got {len(folds)}")
    choices, outcomes = [], []
    for i, test in enumerate(folds):
        train = [item for j, fold in enumerate(folds) if j != i for item in fold]
        best, _ = choose(candidates, evaluate, train, tolerance)
        choices.append(best)
        outcomes.append(evaluate(best, test))
        if progress is not None:
            progress(i + 1, len(folds), "folds cross-validated")
    return CrossValidation(choices, outcomes)
