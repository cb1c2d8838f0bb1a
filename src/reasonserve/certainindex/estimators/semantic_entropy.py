"""Semantic-entropy certainty over the answers of several reasoning paths.

``n`` answers fall into groups of sizes ``c_1..c_m`` (answer equivalence for closed-form
answers, embedding or token-set clustering for open-ended ones). With
``H = -sum_i (c_i/n) log(c_i/n)``, the certainty is ``(log n - H) / log n`` in [0, 1]:
1 when all answers agree, 0 when all differ. Conventions: ``n = 1`` gives 1 (one
answer cannot disagree with itself); ``n = 0`` gives 0 (nothing observed yet).
Empty answers are not counted.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["SemanticEntropy", "SemanticEntropyState", "entropy_certainty"]


def entropy_certainty(counts: torch.Tensor) -> torch.Tensor:
    """Certainty per program from group counts ``[P, G]`` (non-negative) -> ``[P]``.

    Uses ``(log n - H) / log n == sum_i c_i log c_i / (n log n)``: one pass, no division
    per group.
    """
    if counts.dim() != 2:
        raise InvalidArgumentError(f"counts must be [P, G], got {tuple(counts.shape)}")
    if not counts.is_floating_point():
        counts = counts.to(torch.float32)
    if not bool(torch.isfinite(counts).all()) or bool((counts < 0).any()):
        raise InvalidArgumentError("counts must be finite and >= 0")
    return _certainty_from_counts(counts)


def _certainty_from_counts(counts: torch.Tensor) -> torch.Tensor:
    n = counts.sum(1)
    n_log_n = torch.xlogy(n, n)
    ratio = torch.xlogy(counts, counts).sum(1) / torch.where(n > 1, n_log_n, 1.0)
    return torch.where(n > 1, ratio, (n == 1).to(counts.dtype)).clamp(0.0, 1.0)


@dataclass
class SemanticEntropyState:
    counts: Counter = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class SemanticEntropy:
    """Entropy certainty over grouped answers; batched and incremental forms."""

    def from_ids(self, class_ids: torch.Tensor) -> torch.Tensor:
        """``[P, S]`` class ids (-1 = not counted) -> certainty ``[P]``.

        Ids must lie in ``[-1, S)`` — each row's ids numbered per program, as
        :func:`group_answers` returns them.
        """
        if class_ids.dim() != 2:
            raise InvalidArgumentError(f"class_ids must be [P, S], got {tuple(class_ids.shape)}")
        ids = class_ids if class_ids.dtype == torch.int64 else class_ids.long()
        s = ids.shape[1]
        if ids.numel() and (int(ids.max()) >= s or int(ids.min()) < -1):
            raise InvalidArgumentError(f"class ids must lie in [-1, {s})")
        valid = ids >= 0
        counts = torch.zeros(ids.shape, dtype=torch.float32).scatter_add_(
            1, ids.clamp(min=0), valid.to(torch.float32)
        )
        return _certainty_from_counts(counts)

    def score(self, class_ids: Sequence[int]) -> float:
        """Certainty of one program from its answers' class ids (-1 = not counted).

        Answers are strings; group them first: ``score(group_answers(answers))``.
        """
        state = self.start()
        value = 0.0
        for c in class_ids:
            value = self.update(state, c)
        return value if class_ids else 0.0

    def start(self) -> SemanticEntropyState:
        return SemanticEntropyState()

    def update(self, state: SemanticEntropyState, class_id: int) -> float:
        """Add one answer's class id (-1 = not counted); returns the certainty. O(groups)."""
        class_id = _class_id(class_id)
        if class_id >= 0:
            state.counts[class_id] += 1
        n = sum(state.counts.values())
        if n <= 1:
            return float(n)
        h = -sum((c / n) * math.log(c / n) for c in state.counts.values())
        return max(0.0, min(1.0, (math.log(n) - h) / math.log(n)))


def _class_id(value) -> int:
    """``value`` as an integer class id; a string or float is a typed error, with the fix."""
    try:
        if isinstance(value, bool):
            raise TypeError
        class_id = operator.index(value)
    except TypeError:
        hint = " (an answer string? group answers first: score(group_answers(answers)))"
        raise InvalidTypeError(
            f"class ids must be integers >= -1, got {type(value).__name__} {value!r:.40}"
            + (hint if isinstance(value, str) else "")
        ) from None
    if class_id < -1:
        raise InvalidArgumentError(f"class ids must be integers >= -1, got {class_id}")
    return class_id
