"""Chain-of-thought early exit: one incremental interface for hosts and for replay.

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

:func:`default_rule` is the shipped rule (see docs/certainindex.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from reasonserve.certainindex.equivalence import AnswerClasses
from reasonserve.certainindex.probe_consistency import HESITATION_WORDS, ProbeConsistency
from reasonserve.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "MAX_COMPARED",
    "SIGNALS",
    "AgreeSpanRule",
    "ProbeObservation",
    "RuleState",
    "StopDecision",
    "StoppingRule",
    "default_rule",
    "window_rule",
]

SIGNALS = frozenset({"answers", "probe_text", "reasoning_text", "logprobs", "budget"})
_MAX_TEXT_CHARS = 100_000  # longer texts are cut to their last this many characters
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

    name: str
    requires: frozenset[str]

    def start(self) -> RuleState: ...


@dataclass(frozen=True, slots=True)
class AgreeSpanRule:
    """Stop when the latest answer has held for ``tokens`` tokens of probes (Dynasor).

    The window in probes is ``ceil(tokens / interval)``, the interval being
    ``interval_tokens`` or, when 0, the smallest gap between probe positions seen so far
    (the first probe's position before that). A probe whose text holds a hesitation
    word, or with an empty answer, is not counted (``hesitation=False``: hesitation
    is ignored). No stop before ``min_tokens``. ``k_probes > 0`` replaces the span by
    a fixed window of that many probes (the "last k agree" baseline).
    """

    tokens: int = 2432
    min_tokens: int = 2048
    interval_tokens: int = 0
    k_probes: int = 0
    hesitation: bool = True
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for key in ("tokens", "min_tokens", "interval_tokens", "k_probes"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"{key} must be an integer >= 0, got {value!r}")
        if self.tokens < 1 and self.k_probes < 1:
            raise InvalidArgumentError("need tokens >= 1 or k_probes >= 1")
        if not self.name:
            label = f"last {self.k_probes} agree" if self.k_probes else f"agree {self.tokens} tok"
            label += f", min {self.min_tokens} tok" if self.min_tokens else ""
            object.__setattr__(self, "name", label)

    @property
    def requires(self) -> frozenset[str]:
        return frozenset({"answers", "probe_text"} if self.hesitation else {"answers"})

    def start(self) -> _AgreeSpanState:
        return _AgreeSpanState(self)


class _AgreeSpanState:
    __slots__ = ("_classes", "_gate", "_interval", "_last", "_last_answer", "_last_position", "_rule", "_run")

    def __init__(self, rule: AgreeSpanRule) -> None:
        self._rule = rule
        self._gate = ProbeConsistency(hesitation_words=HESITATION_WORDS)
        self._classes = AnswerClasses(max_compared=MAX_COMPARED)
        self._interval = rule.interval_tokens
        self._last, self._run, self._last_answer, self._last_position = -1, 0, None, -1

    def _window(self, position: int) -> int:
        if self._rule.k_probes:
            return self._rule.k_probes
        if self._rule.interval_tokens == 0:
            gap = position - self._last_position if self._last_position >= 0 else position
            if gap > 0:
                self._interval = gap if self._interval == 0 else min(self._interval, gap)
        return max(1, -(-self._rule.tokens // max(self._interval, 1)))

    def observe(self, obs: ProbeObservation) -> StopDecision:
        window = self._window(obs.position)
        self._last_position = obs.position
        text = obs.text[-_MAX_TEXT_CHARS:]
        confident = not self._rule.hesitation or self._gate.is_confident(text)
        cid = self._classes.add(obs.answer) if confident else -1
        if cid >= 0:
            self._run = self._run + 1 if cid == self._last else 1
            if cid != self._last:
                self._last_answer = obs.answer
            self._last = cid
        certainty = min(1.0, self._run / window)
        stop = self._last >= 0 and self._run >= window and obs.position >= self._rule.min_tokens
        return StopDecision(stop, self._last_answer, certainty)


def default_rule() -> StoppingRule:
    """The shipped rule: the learned rule of ``stop_default.py``, fitted and calibrated on
    the development recordings by ``python -m reasonserve.replay.stop_training`` and
    applied unchanged (docs/certainindex.md)."""
    from reasonserve.certainindex.stop_default import DEFAULT_RULE
    from reasonserve.certainindex.stop_learned import LogisticStopRule

    return LogisticStopRule.from_json(DEFAULT_RULE)


def window_rule() -> StoppingRule:
    """The earlier shipped rule: the answer held for 2,432 tokens of probes, at least 2,048 in."""
    return AgreeSpanRule(2432, 2048)
