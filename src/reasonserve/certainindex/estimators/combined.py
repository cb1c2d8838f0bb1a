"""Combining signals: certain only when every signal passes its own threshold (App. B.1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reasonserve.certainindex._validate import check_threshold
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["Combined", "CombinedResult"]


@dataclass(frozen=True, slots=True)
class CombinedResult:
    certain: bool
    passed: dict[str, bool]
    values: dict[str, float]


@dataclass(frozen=True, slots=True)
class Combined:
    """``thresholds``: signal name -> threshold in [0, 1]; a signal passes at ``>=``."""

    thresholds: Mapping[str, float]

    def __post_init__(self) -> None:
        if not self.thresholds:
            raise InvalidArgumentError("thresholds must name at least one signal")
        for name, t in self.thresholds.items():
            check_threshold(f"thresholds[{name!r}]", t)

    def evaluate(self, values: Mapping[str, float]) -> CombinedResult:
        missing = set(self.thresholds) - set(values)
        if missing:
            raise InvalidArgumentError(f"values are missing signals {sorted(missing)}")
        passed = {n: values[n] >= t for n, t in self.thresholds.items()}  # NaN never passes
        return CombinedResult(all(passed.values()), passed, {n: float(values[n]) for n in self.thresholds})
