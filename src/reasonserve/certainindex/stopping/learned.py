"""A learned early-exit rule: logistic regression over :mod:`.stop_features`.

``score = sigmoid(bias + sum_j w_j * (x_j - mean_j) / scale_j)`` estimates the chance
that exiting now with the current answer costs no accuracy (the exit answer is right,
or the full run would have been wrong anyway). The rule exits at the first probe with
an answer whose score reaches ``threshold``; the threshold is chosen with a
Clopper-Pearson risk bound (:mod:`.conformal`). With ``budget_exit`` (and a host that
gives the budget) it also exits at the last probe before the budget, whatever the
score: a run that reaches its budget is cut mid-thought, and the latest probe's answer
is right more often than the answer of the cut run (docs/benchmarks.md). The weights are fitted by
:func:`fit_logistic` (Newton's method with a small ridge penalty: deterministic, no
random state) and stored as JSON (:meth:`LogisticStopRule.to_json`).

A threshold calibrated on one model's recordings does not transfer exactly to another
model (the scores shift). ``threshold_quantile`` records where the threshold lies in
the development recordings' score distribution (the share of answered probes scoring
below it); :meth:`LogisticStopRule.for_warmup` moves the threshold to the same
quantile of a host's own unlabelled warm-up programs (docs/benchmarks.md measures it:
the loss stays inside the tolerance on each held-out model, at a little less savings).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from reasonserve.certainindex.stopping.features import FEATURE_GROUPS, FEATURE_NAMES, FeatureState
from reasonserve.certainindex.stopping.observation import ProbeObservation, StopDecision, StoppingRule
from reasonserve.certainindex.stopping.shipped_rule import DEFAULT_RULE
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["LogisticStopRule", "default_rule", "fit_logistic"]

# Which signal each feature reads (a rule requires the signals of its non-zero weights).
_SIGNAL_OF = {name: signal for signal, names in FEATURE_GROUPS.items() for name in names}


@dataclass(frozen=True, slots=True)
class LogisticStopRule:
    """Exit when the learned score reaches ``threshold`` (see module docstring)."""

    weights: tuple[float, ...]
    means: tuple[float, ...]
    scales: tuple[float, ...]
    bias: float
    threshold: float
    name: str = "learned"
    budget_exit: bool = True
    threshold_quantile: float | None = None  # share of answered development probes scoring below threshold

    def __post_init__(self) -> None:
        d = len(FEATURE_NAMES)
        for key in ("weights", "means", "scales"):
            values = getattr(self, key)
            if len(values) != d or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                raise InvalidArgumentError(f"{key} must be {d} finite numbers, one per feature")
        if any(s <= 0 for s in self.scales):
            raise InvalidArgumentError("scales must be > 0")
        if not math.isfinite(self.bias) or not 0 <= self.threshold <= 1.0 + 1e-12:
            raise InvalidArgumentError(f"bias must be finite and threshold in [0, 1], got {self.threshold!r}")
        if not isinstance(self.budget_exit, bool):
            raise InvalidArgumentError(f"budget_exit must be a bool, got {self.budget_exit!r}")
        q = self.threshold_quantile
        if q is not None and (isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1):
            raise InvalidArgumentError(f"threshold_quantile must be in [0, 1] or None, got {q!r}")

    @property
    def requires(self) -> frozenset[str]:
        used = {_SIGNAL_OF[n] for n, w in zip(FEATURE_NAMES, self.weights, strict=True) if w != 0.0}
        return frozenset({"answers"} | used | ({"budget"} if self.budget_exit else set()))

    def score(self, features: Iterable[float]) -> float:
        z = self.bias + sum(w * (x - m) / s for w, x, m, s in
                            zip(self.weights, features, self.means, self.scales, strict=True))  # fmt: skip
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def with_threshold(
        self, threshold: float, name: str | None = None, quantile: float | None = None
    ) -> LogisticStopRule:
        """This rule at ``threshold`` (``quantile``: where it lies among the scores it was set on)."""
        return replace(self, threshold=threshold, name=name or self.name, threshold_quantile=quantile)

    def for_warmup(self, programs: Iterable[Sequence[ProbeObservation]]) -> LogisticStopRule:
        """This rule with its threshold at ``threshold_quantile`` of the scores of the answered
        probes of ``programs`` (a host's unlabelled warm-up recordings, in probe order)."""
        if self.threshold_quantile is None:
            raise InvalidArgumentError(f"rule {self.name!r} records no threshold_quantile to transfer")
        scores = self.answered_scores(programs)
        if not scores:
            raise InvalidArgumentError("the warm-up programs have no answered probe")
        moved = float(np.quantile(np.asarray(scores), self.threshold_quantile, method="higher"))
        name = f"{self.name} (warm-up threshold)"
        return self.with_threshold(min(1.0, moved), name, self.threshold_quantile)

    def answered_scores(self, programs: Iterable[Sequence[ProbeObservation]]) -> list[float]:
        """The score of every probe that has a current answer, program by program."""
        scores: list[float] = []
        for program in programs:
            state = FeatureState()
            for obs in program:
                x = state.update(obs)
                if state.current_answer is not None:
                    scores.append(self.score(x))
        return scores

    def start(self) -> _LogisticState:
        return _LogisticState(self)

    def to_json(self) -> dict:
        return {"features": list(FEATURE_NAMES), "weights": list(self.weights), "means": list(self.means),
                "scales": list(self.scales), "bias": self.bias, "threshold": self.threshold,
                "name": self.name, "budget_exit": self.budget_exit,
                "threshold_quantile": self.threshold_quantile}  # fmt: skip

    @classmethod
    def from_json(cls, payload: dict) -> LogisticStopRule:
        if not isinstance(payload, dict) or payload.get("features") != list(FEATURE_NAMES):
            raise InvalidArgumentError("a learned stopping rule needs the feature names of this version")
        try:
            return cls(tuple(payload["weights"]), tuple(payload["means"]), tuple(payload["scales"]),
                       float(payload["bias"]), float(payload["threshold"]),
                       str(payload.get("name", "learned")), payload.get("budget_exit", False),
                       payload.get("threshold_quantile"))
        except (KeyError, TypeError, ValueError) as exc:  # fmt: skip
            raise InvalidArgumentError(f"malformed learned stopping rule: {exc}") from None

    @classmethod
    def load(cls, path) -> LogisticStopRule:
        with open(path, encoding="utf-8") as fh:
            return cls.from_json(json.load(fh))


class _LogisticState:
    __slots__ = ("_features", "_rule")

    def __init__(self, rule: LogisticStopRule) -> None:
        self._rule = rule
        self._features = FeatureState()

    def observe(self, obs: ProbeObservation) -> StopDecision:
        x = self._features.update(obs)
        answer = self._features.current_answer
        if answer is None:
            return StopDecision(False, None, 0.0)
        certainty = self._rule.score(x)
        at_end = self._rule.budget_exit and self._features.at_budget_end(obs)
        return StopDecision(certainty >= self._rule.threshold or at_end, answer, certainty)


def fit_logistic(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, *, l2: float = 1e-3, iterations: int = 30
) -> LogisticStopRule:
    """Weighted ridge logistic regression on standardized features (threshold left at 1).

    ``x [N, F]`` features, ``y [N]`` labels in {0, 1}, ``w [N]`` example weights.
    """
    if x.ndim != 2 or x.shape[1] != len(FEATURE_NAMES) or y.shape != (len(x),) or w.shape != (len(x),):
        raise InvalidArgumentError(f"need x [N, {len(FEATURE_NAMES)}], y [N], w [N]; got {x.shape}")
    if len(x) == 0 or not (np.isfinite(x).all() and np.isfinite(w).all()) or w.sum() <= 0:
        raise InvalidArgumentError("need at least one example, finite features and positive weights")
    means = x.mean(0)
    scales = x.std(0)
    scales[scales < 1e-9] = 1.0
    z = np.hstack([(x - means) / scales, np.ones((len(x), 1))])
    wn = w / w.sum()
    beta = np.zeros(z.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ beta, -700, 700)))
        grad = z.T @ (wn * (p - y)) + l2 * beta
        hess = (z * (wn * p * (1 - p))[:, None]).T @ z + l2 * np.eye(len(beta))
        beta = beta - np.linalg.solve(hess, grad)
    constant = x.std(0) < 1e-9  # a signal never seen in training gets no weight
    weights = tuple(0.0 if constant[j] else float(v) for j, v in enumerate(beta[:-1]))
    return LogisticStopRule(weights, tuple(map(float, means)), tuple(map(float, scales)),
                            float(beta[-1]), 1.0)  # fmt: skip


def default_rule() -> StoppingRule:
    """The shipped rule: the learned rule of ``shipped_rule.py``, fitted and calibrated on
    the development recordings by ``python -m reasonserve.replay.stop_training`` and
    applied unchanged (docs/certainindex.md)."""
    return LogisticStopRule.from_json(DEFAULT_RULE)
