"""Baseline signals (Dynasor App. B.3): reasoning length and mean token log-probability."""

from __future__ import annotations

import math
from collections.abc import Sequence

from reasonserve.core.checks import check_positive
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["length_certainty", "logprob_certainty"]


def length_certainty(tokens_so_far: int, max_tokens: int) -> float:
    """``tokens_so_far / max_tokens`` clipped to [0, 1]: longer reasoning, more settled."""
    check_positive("max_tokens", max_tokens)
    if not isinstance(tokens_so_far, int) or tokens_so_far < 0:
        raise InvalidArgumentError(f"tokens_so_far must be an int >= 0, got {tokens_so_far!r}")
    return min(1.0, tokens_so_far / max_tokens)


def logprob_certainty(logprobs: Sequence[float]) -> float:
    """``exp(mean log-probability)`` of the tokens so far, in [0, 1] (0 when empty).

    Non-finite log-probabilities are skipped.
    """
    finite = [x for x in logprobs if isinstance(x, (int, float)) and math.isfinite(x)]
    if not finite:
        return 0.0
    return min(1.0, math.exp(min(0.0, sum(finite) / len(finite))))
