"""The agree-span rule (Dynasor): stop once the latest probe answer has held long enough.

Also the "last k agree" baseline (a fixed window of probes) and :func:`window_rule`,
the rule shipped before the learned one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reasonserve.certainindex.answers.equivalence import AnswerClasses
from reasonserve.certainindex.estimators.probe_consistency import HESITATION_WORDS, ProbeConsistency
from reasonserve.certainindex.stopping.observation import (
    MAX_COMPARED,
    MAX_TEXT_CHARS,
    ProbeObservation,
    StopDecision,
    StoppingRule,
)
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["AgreeSpanRule", "window_rule"]


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
        self._last, self._run, self._last_position = -1, 0, -1
        self._last_answer: str | None = None

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
        text = obs.text[-MAX_TEXT_CHARS:]
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


def window_rule() -> StoppingRule:
    """The earlier shipped rule: the answer held for 2,432 tokens of probes, at least 2,048 in."""
    return AgreeSpanRule(2432, 2048)
