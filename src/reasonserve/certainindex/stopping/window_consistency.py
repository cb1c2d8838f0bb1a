"""Dynasor's window consistency as a stopping rule: stop once most of the last probes agree.

Over the last ``window`` counted probes (a probe whose text hesitates, or with an empty
answer, is not counted), ``C_k`` is the share that equals the latest answer
(:class:`~reasonserve.certainindex.estimators.ProbeConsistency`); the rule stops when
at most ``tolerance`` of them disagree, ``C_k >= (window - tolerance) / window``, and
not before ``min_tokens``. With ``tolerance`` 0 it decides as ``AgreeSpanRule(k_probes=
window)``. The offline replay's ``WindowRule(window, threshold)`` is the same rule over
recorded probes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reasonserve.certainindex.answers.equivalence import AnswerClasses
from reasonserve.certainindex.estimators.probe_consistency import ProbeConsistency
from reasonserve.certainindex.stopping.observation import (
    MAX_COMPARED,
    MAX_TEXT_CHARS,
    ProbeObservation,
    StopDecision,
)
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["WindowConsistencyRule"]


@dataclass(frozen=True, slots=True)
class WindowConsistencyRule:
    """See the module docstring. ``hesitation=False``: hesitant probes count too."""

    window: int
    tolerance: int = 0
    min_tokens: int = 0
    hesitation: bool = True
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for key, low in (("window", 1), ("tolerance", 0), ("min_tokens", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidArgumentError(f"{key} must be an integer >= {low}, got {value!r}")
        if self.tolerance >= self.window:
            raise InvalidArgumentError(f"tolerance must be < window ({self.window}), got {self.tolerance}")
        if not self.name:
            label = f"{self.window - self.tolerance} of last {self.window} agree"
            label += f", min {self.min_tokens} tok" if self.min_tokens else ""
            object.__setattr__(self, "name", label)

    @property
    def threshold(self) -> float:
        return (self.window - self.tolerance) / self.window

    @property
    def requires(self) -> frozenset[str]:
        return frozenset({"answers", "probe_text"} if self.hesitation else {"answers"})

    def start(self) -> _WindowState:
        return _WindowState(self)


class _WindowState:
    __slots__ = ("_classes", "_estimator", "_last", "_last_answer", "_rule", "_state")

    def __init__(self, rule: WindowConsistencyRule) -> None:
        self._rule = rule
        self._estimator = ProbeConsistency(window=rule.window, threshold=rule.threshold)
        self._state = self._estimator.start()
        self._classes = AnswerClasses(max_compared=MAX_COMPARED)
        self._last = -1
        self._last_answer: str | None = None

    def observe(self, obs: ProbeObservation) -> StopDecision:
        confident = not self._rule.hesitation or self._estimator.is_confident(obs.text[-MAX_TEXT_CHARS:])
        cid = self._classes.add(obs.answer) if confident else -1
        if cid >= 0 and cid != self._last:
            self._last, self._last_answer = cid, obs.answer
        certainty = self._estimator.update(self._state, cid)
        ready = self._last >= 0 and obs.position >= self._rule.min_tokens
        stop = ready and self._estimator.should_stop(certainty)
        return StopDecision(stop, self._last_answer, certainty)
