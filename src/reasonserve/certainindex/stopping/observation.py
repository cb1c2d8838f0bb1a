"""The early-exit interface: what a host observes per probe and what a rule answers.

A host probes the model every few reasoning tokens and hands each probe to a rule's
state as a :class:`ProbeObservation`; the state answers a :class:`StopDecision`
(stop now?, with which answer, how certain). The offline replay
(``reasonserve replay probes``) feeds recorded probes through the very same
``observe`` calls, so what is measured there is what a host runs.

A rule says which signals it reads in ``requires`` (a subset of :data:`SIGNALS`):

* ``answers`` — the extracted probe answer (every rule);
* ``probe_text`` — the raw probe continuation (hesitation words, what follows ``}``);
* ``reasoning_text`` — the reasoning produced since the previous probe;
* ``logprobs`` — log-probabilities of the probe answer's tokens and of ``</think>``;
* ``budget`` — the program's reasoning-token budget (``budget_tokens``).

A host that cannot give a signal a rule requires should pick another rule; a missing
optional signal (``text=""``, ``answer_logprobs=None``, ``budget_tokens=None``) is read
as "not observed".

The rules live beside this module: :mod:`.agree_span` (the answer held for a span of
tokens) and :mod:`.learned` (a logistic regression over :mod:`.features`; the shipped
rule, :func:`~reasonserve.certainindex.stopping.learned.default_rule`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["MAX_COMPARED", "MAX_TEXT_CHARS", "SIGNALS", "ProbeObservation", "RuleState", "StopDecision",
           "StoppingRule"]

SIGNALS = frozenset({"answers", "probe_text", "reasoning_text", "logprobs", "budget"})
MAX_TEXT_CHARS = 100_000  # longer texts are cut to their last this many characters
#: A new probe answer is compared with at most this many answer classes (the latest), so a
#: state's cost per probe stays bounded on runs that churn through answers; the most in one
#: development recording is 252 (docs/certainindex.md).
MAX_COMPARED = 512


@dataclass(frozen=True, slots=True)
class ProbeObservation:
    """One probe of one reasoning program.

    ``position``: reasoning tokens so far; ``answer``: the extracted probe answer
    (``None``/empty: none); ``text``: the raw probe continuation; ``reasoning_tail``:
    reasoning text since the previous probe; ``answer_logprobs``: log-probabilities of
    the answer's tokens; ``think_end_logprob``: log P(``</think>``) at the probe;
    ``budget_tokens``: the program's reasoning-token budget (the host's ``max_tokens``;
    ``None``: unknown).
    """

    position: int
    answer: str | None
    text: str = ""
    reasoning_tail: str = ""
    answer_logprobs: tuple[float, ...] | None = None
    think_end_logprob: float | None = None
    budget_tokens: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.position, bool) or not isinstance(self.position, int) or self.position < 0:
            raise InvalidArgumentError(f"position must be an integer >= 0 (tokens), got {self.position!r}")
        budget = self.budget_tokens
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise InvalidArgumentError(f"budget_tokens must be an integer >= 1 or None, got {budget!r}")
        if self.answer is not None and not isinstance(self.answer, str):
            raise InvalidTypeError(f"answer must be str or None, got {type(self.answer).__name__}")
        for name in ("text", "reasoning_tail"):
            if not isinstance(getattr(self, name), str):
                raise InvalidTypeError(f"{name} must be str, got {type(getattr(self, name)).__name__}")
        if self.answer_logprobs is not None:
            if not isinstance(self.answer_logprobs, tuple):
                raise InvalidTypeError("answer_logprobs must be a tuple of floats or None")
            for lp in self.answer_logprobs:
                _check_logprob("answer_logprobs", lp)
        if self.think_end_logprob is not None:
            _check_logprob("think_end_logprob", self.think_end_logprob)


def _check_logprob(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name}: expected floats, got {type(value).__name__}")
    if not (math.isfinite(value) or value == -math.inf) or value > 1e-6:
        raise InvalidArgumentError(f"{name}: a log-probability is <= 0 and not NaN, got {value!r}")


class StopDecision(NamedTuple):
    """``stop``: exit now; ``answer``: the answer to return on exit; ``certainty``: in [0, 1]."""

    stop: bool
    answer: str | None
    certainty: float


class RuleState(Protocol):
    """One program's incremental state; ``observe`` is O(1) or O(window) per probe."""

    def observe(self, obs: ProbeObservation) -> StopDecision: ...


class StoppingRule(Protocol):
    """A stopping rule: its name, the signals it reads, and a fresh state per program."""

    @property
    def name(self) -> str: ...  # read-only: a rule may be a frozen dataclass
    @property
    def requires(self) -> frozenset[str]: ...

    def start(self) -> RuleState: ...
