"""Per-request generation parameters, validated at construction."""

from __future__ import annotations

import math
from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["SamplingParams"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """``temperature`` 0 is greedy. ``seed`` makes sampling reproducible: the token at
    position ``p`` depends only on (seed, p) and the logits. Without a seed, the engine
    draws one from its own seeded generator. ``deterministic`` asks for bitwise
    reproducible output whatever the batch (see ``docs/engine.md``)."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    deterministic: bool = False
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    priority: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise InvalidArgumentError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if (
            not isinstance(self.temperature, (int, float))
            or not math.isfinite(self.temperature)
            or self.temperature < 0
        ):
            raise InvalidArgumentError(f"temperature must be finite and >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise InvalidArgumentError(f"top_p must lie in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise InvalidArgumentError(f"top_k must be an int >= 0 (0 disables it), got {self.top_k!r}")
        if not 0 <= self.min_p <= 1:
            raise InvalidArgumentError(f"min_p must lie in [0, 1], got {self.min_p!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or not 0 <= self.seed < 2**64):
            raise InvalidArgumentError(f"seed must be an int in [0, 2**64), got {self.seed!r}")
