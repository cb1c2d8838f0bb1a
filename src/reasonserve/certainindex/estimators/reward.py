"""Reward-model certainty: aggregate (process) reward scores into [0, 1].

Scores are first mapped to [0, 1] with ``(s - low) / (high - low)`` and clipped; then
aggregated over a program's paths or steps with ``mean`` (MCTS), ``max`` (Rebase),
``min``, ``last`` or ``product`` (of PRM step scores). Non-finite scores (NaN, inf)
are treated as missing; a program with no finite score has certainty 0 (unknown).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["AGGREGATES", "RewardCertainty"]

AGGREGATES = ("mean", "max", "min", "last", "product")


@dataclass(frozen=True, slots=True)
class RewardCertainty:
    aggregate: str = "mean"
    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if self.aggregate not in AGGREGATES:
            raise InvalidArgumentError(f"aggregate must be one of {AGGREGATES}, got {self.aggregate!r}")
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.high <= self.low:
            raise InvalidArgumentError(f"need finite low < high, got low={self.low}, high={self.high}")

    def score(self, scores: Sequence[float]) -> float:
        """Certainty of one program from its scores (any order; ``last`` = final one)."""
        values = [min(1.0, max(0.0, (float(s) - self.low) / (self.high - self.low)))
                  for s in scores if isinstance(s, (int, float)) and math.isfinite(s)]  # fmt: skip
        if not values:
            return 0.0
        if self.aggregate == "mean":
            return sum(values) / len(values)
        if self.aggregate == "max":
            return max(values)
        if self.aggregate == "min":
            return min(values)
        if self.aggregate == "last":
            return values[-1]
        return math.prod(values)

    def scores(self, scores: torch.Tensor) -> torch.Tensor:
        """Batched: ``[P, S]`` scores (NaN = missing) -> certainty ``[P]``."""
        if scores.dim() != 2:
            raise InvalidArgumentError(f"scores must be [P, S], got {tuple(scores.shape)}")
        s = scores.to(torch.float64)
        ok = torch.isfinite(s)
        v = ((s - self.low) / (self.high - self.low)).clamp(0, 1)
        count = ok.sum(1)
        if self.aggregate == "mean":
            out = torch.where(ok, v, 0.0).sum(1) / count.clamp(min=1)
        elif self.aggregate == "max":
            out = torch.where(ok, v, -1.0).amax(1)
        elif self.aggregate == "min":
            out = torch.where(ok, v, 2.0).amin(1)
        elif self.aggregate == "product":
            out = torch.where(ok, v, 1.0).prod(1)
        else:
            last = (ok.long() * torch.arange(1, s.shape[1] + 1)).argmax(1)
            out = v.gather(1, last[:, None]).squeeze(1)
        return torch.where(count > 0, out, torch.zeros_like(out))
