"""Per-request generation parameters, validated at construction.

Every field is checked here, with an :class:`InvalidArgumentError` naming the field, so
nothing out of range reaches the sampling kernels or the scheduler.
"""

from __future__ import annotations

import math
from dataclasses import InitVar, dataclass

from reasonserve.core.checks import check_int_in
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["MAX_LOGPROBS", "SamplingParams"]

_INT31 = 2**31 - 1
_INT63 = 2**63 - 1
MAX_LOGPROBS = 20


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """``temperature`` 0 is greedy. ``seed`` makes sampling reproducible: the token at
    position ``p`` depends only on (seed, p) and the logits. Without a seed, the engine
    draws one from its own seeded generator. ``deterministic`` asks for bitwise
    reproducible output whatever the batch (see ``docs/engine.md``); LLM-42's name for
    the flag, ``is_deterministic``, is accepted as a keyword and read as a property (the
    two must agree when both are given).

    Ranges: ``max_tokens`` 1..2**31-1; ``temperature`` finite, >= 0; ``top_p`` in (0, 1];
    ``top_k`` -1 or 0 (off) or 1..2**31-1; ``min_p`` in [0, 1]; ``seed`` 0..2**63-1;
    ``stop_token_ids`` ints 0..2**31-1; ``priority`` -2**31..2**31-1 (larger is more
    urgent); ``logprobs`` None or 0..20: return each output token's logprob and that many
    most likely alternatives (``engine/logprobs.py``); ``thinking_token_budget`` None or
    >= 0: after that many output tokens without the end-of-thinking token, the engine
    writes it instead of sampling (the request moves to ANSWERING)."""

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
    logprobs: int | None = None
    thinking_token_budget: int | None = None
    is_deterministic: InitVar[bool | None] = None  # LLM-42's spelling of ``deterministic``

    def __post_init__(self, is_deterministic: bool | None) -> None:
        _deterministic_alias(self, is_deterministic)
        check_int_in("max_tokens", self.max_tokens, 1, _INT31)
        if not _is_real(self.temperature) or self.temperature < 0:
            raise InvalidArgumentError(f"temperature must be finite and >= 0, got {self.temperature!r}")
        if not _is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise InvalidArgumentError(f"top_p must be a number in (0, 1], got {self.top_p!r}")
        if not _is_int(self.top_k) or not (self.top_k in (-1, 0) or 1 <= self.top_k <= _INT31):
            raise InvalidArgumentError(
                f"top_k must be -1 or 0 (off) or an int in [1, {_INT31}], got {self.top_k!r}"
            )
        if not _is_real(self.min_p) or not 0 <= self.min_p <= 1:
            raise InvalidArgumentError(f"min_p must be a number in [0, 1], got {self.min_p!r}")
        if self.seed is not None:
            check_int_in("seed", self.seed, 0, _INT63)
        for name in ("deterministic", "ignore_eos"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.stop_token_ids, (tuple, list)):
            raise InvalidArgumentError(f"stop_token_ids must be a tuple of ints, got {self.stop_token_ids!r}")
        for token in self.stop_token_ids:
            check_int_in("stop_token_ids", token, 0, _INT31)
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        check_int_in("priority", self.priority, -(2**31), _INT31)
        if self.logprobs is not None:
            check_int_in("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        if self.thinking_token_budget is not None:
            check_int_in("thinking_token_budget", self.thinking_token_budget, 0, _INT31)

    @property
    def effective_top_k(self) -> int:
        """``top_k`` for the sampling kernel (0 = off; -1 is the OpenAI spelling of off)."""
        return max(self.top_k, 0)


def _deterministic_alias(params: SamplingParams, is_deterministic: bool | None) -> None:
    """Fold the ``is_deterministic`` keyword into ``deterministic``; a conflict is an error."""
    if is_deterministic is None:
        return
    if not isinstance(is_deterministic, bool):
        raise InvalidArgumentError(f"is_deterministic must be a bool, got {is_deterministic!r}")
    if params.deterministic and not is_deterministic:
        raise InvalidArgumentError("deterministic=True and is_deterministic=False disagree; give one of them")
    object.__setattr__(params, "deterministic", is_deterministic)


# Read access under LLM-42's name. Set after the class is built: inside the class body the
# property would become the InitVar's default.
SamplingParams.is_deterministic = property(  # type: ignore[attr-defined]
    lambda self: self.deterministic, doc="``deterministic`` under LLM-42's name (§4: ``is_deterministic``)."
)
