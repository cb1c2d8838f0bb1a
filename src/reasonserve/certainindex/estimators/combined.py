"""Combining signals: certain only when every signal passes its own threshold (App. B.1),
and the paper's thresholds per workload (Table 3) as ready-made combinations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from reasonserve.certainindex._validate import check_threshold
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["PAPER_THRESHOLDS", "Combined", "CombinedResult"]


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


#: Dynasor's Table 3 (App. F): ``(algorithm, dataset) -> (thresholds, detect_at)``. The
#: semantic-entropy certainty is the signal ``"entropy"``, the normalized reward
#: ``"reward"``; a program stops at its ``detect_at`` knob (samples for SC, iterations for
#: MCTS, width for Rebase) when every signal passes (Rebase's MATH runs: the MATH-OAI subset).
PAPER_THRESHOLDS: Mapping[tuple[str, str], tuple[Combined, int]] = MappingProxyType({
    ("sc", "math"): (Combined({"entropy": 0.7}), 5),
    ("sc", "gsm8k"): (Combined({"entropy": 0.7}), 5),
    ("sc", "livecodebench"): (Combined({"entropy": 0.4}), 5),
    ("mcts", "gsm8k"): (Combined({"entropy": 0.99, "reward": 0.4}), 3),
    ("mcts", "asdiv"): (Combined({"reward": 0.4}), 3),
    ("rebase", "gsm8k"): (Combined({"entropy": 0.85, "reward": 0.99}), 16),
    ("rebase", "math"): (Combined({"entropy": 0.75}), 16),
})  # fmt: skip
