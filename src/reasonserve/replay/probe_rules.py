"""Stopping rules replayed over recorded probe streams.

A rule reads a trajectory's probes in order; when it fires at probe ``i`` the program
exits with the agreed answer and costs ``positions[i]`` tokens, otherwise it runs to
the end (``tokens_used``) and answers its final answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.certainindex.calibration import Outcome
from reasonserve.certainindex.estimators.probe_consistency import ProbeConsistency
from reasonserve.certainindex.estimators.tv_stability import TVStability
from reasonserve.certainindex.stopping import StoppingRule
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.replay.probe_runs import Trajectory

__all__ = [
    "OracleRule",
    "TVRule",
    "TargetOracleRule",
    "TokenWindowRule",
    "WindowRule",
    "evaluate",
    "online_first_stop",
]


@dataclass(frozen=True, slots=True)
class WindowRule:
    """Stop when the last ``window`` counted probes agree (``C_k >= threshold``)."""

    window: int
    threshold: float = 1.0
    min_tokens: int = 0

    @property
    def name(self) -> str:
        extra = f", min {self.min_tokens} tok" if self.min_tokens else ""
        return f"window {self.window}" + (f" tau {self.threshold:g}" if self.threshold < 1 else "") + extra

    def first_stop(self, tr: Trajectory) -> tuple[int, int] | None:
        if self.threshold >= 1.0:
            # All of the last `window` counted probes agree <=> the current run is that long.
            for i, run in enumerate(tr.run_at):
                if run >= self.window and tr.positions[i] >= self.min_tokens:
                    return i, tr.current_at[i]
            return None
        return self.first_stop_by_estimator(tr)

    def first_stop_by_estimator(self, tr: Trajectory) -> tuple[int, int] | None:
        """The same decision through :class:`ProbeConsistency` (any threshold)."""
        est = ProbeConsistency(window=self.window, threshold=self.threshold)
        state = est.start()
        last = -1
        for i, cid in enumerate(tr.classes):
            certainty = est.update(state, cid)
            last = cid if cid >= 0 else last
            if last >= 0 and tr.positions[i] >= self.min_tokens and est.should_stop(certainty):
                return i, last
        return None


@dataclass(frozen=True, slots=True)
class TokenWindowRule:
    """Stop when the latest answer has held for ``tokens`` tokens of probes.

    The window in probes is ``ceil(tokens / probe interval)`` for each trajectory, so a
    setting chosen on 64-token probes means the same span of reasoning on 32- or
    128-token probes (a window counted in probes would not).
    """

    tokens: int
    min_tokens: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 1:
            raise InvalidArgumentError(f"agreement span must be an integer >= 1 token, got {self.tokens!r}")
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int) or self.min_tokens < 0:
            raise InvalidArgumentError(f"min tokens must be an integer >= 0, got {self.min_tokens!r}")

    @property
    def name(self) -> str:
        return f"agree {self.tokens} tok" + (f", min {self.min_tokens} tok" if self.min_tokens else "")

    @property
    def spec(self) -> str:
        """The ``--setting`` string that selects this rule."""
        return f"agree={self.tokens}" + (f",min={self.min_tokens}" if self.min_tokens else "")

    @classmethod
    def from_setting(cls, setting: dict[str, int | float]) -> TokenWindowRule:
        """From parsed ``agree=<tokens>[,min=<tokens>]`` (see :mod:`reasonserve.replay.settings`)."""
        if "agree" not in setting:
            raise InvalidArgumentError("a token-window setting needs agree=<tokens>")
        return cls(int(setting["agree"]), int(setting.get("min", 0)))

    def first_stop(self, tr: Trajectory) -> tuple[int, int] | None:
        need = max(1, -(-self.tokens // tr.probe_interval()))
        return WindowRule(need, 1.0, self.min_tokens).first_stop(tr)


@dataclass(frozen=True, slots=True)
class TVRule:
    """Stop when the TV stability test of Definition 2 passes; answer = mode of the last k."""

    k: int
    epsilon: float
    min_tokens: int = 0

    @property
    def name(self) -> str:
        extra = f", min {self.min_tokens} tok" if self.min_tokens else ""
        return f"TV k {self.k} eps {self.epsilon:g}{extra}"

    def first_stop(self, tr: Trajectory) -> tuple[int, int] | None:
        est = TVStability(k=self.k, epsilon=self.epsilon)
        state = est.start()
        for i, cid in enumerate(tr.classes):
            certainty = est.update(state, cid)
            if tr.positions[i] >= self.min_tokens and est.should_stop(certainty):
                recent = list(state)[-self.k :]
                counts = Counter(recent)
                best = max(counts, key=lambda c: (counts[c], max(j for j, x in enumerate(recent) if x == c)))
                return i, best
        return None


@dataclass(frozen=True, slots=True)
class OracleRule:
    """For context only: the earliest probe after which every probe equals the final answer."""

    name: str = "oracle"

    def first_stop(self, tr: Trajectory) -> tuple[int, int] | None:
        if tr.final_class < 0:
            return None
        start = None
        for i in range(len(tr.raw_classes) - 1, -1, -1):
            if tr.raw_classes[i] != tr.final_class:
                break
            start = i
        return None if start is None else (start, tr.final_class)


@dataclass(frozen=True, slots=True)
class TargetOracleRule:
    """For context only: the most any rule could save, knowing the right answer.

    Exits at the first probe whose answer is correct; a trajectory whose final answer
    is wrong and whose probes never are exits at its first probe (nothing to lose).
    """

    name: str = "target oracle"

    def first_stop(self, tr: Trajectory) -> tuple[int, int] | None:
        for i, cid in enumerate(tr.raw_classes):
            if cid >= 0 and tr.class_correct[cid]:
                return i, cid
        if tr.final_correct:
            return None
        return next(((i, c) for i, c in enumerate(tr.raw_classes) if c >= 0), None)


def online_first_stop(rule: StoppingRule, tr: Trajectory) -> tuple[int, int] | None:
    """Feed ``tr``'s probes to a fresh state of ``rule``, as a host would; the first stop.

    The exit answer is mapped back to its class among ``tr``'s probe answers.
    """
    state = rule.start()
    for i, obs in enumerate(tr.observations()):
        decision = state.observe(obs)
        if decision.stop:
            cid = tr.class_of(decision.answer)
            if cid < 0:
                raise InvalidArgumentError(f"{rule.name}: exit answer {decision.answer!r} is no probe answer")
            return i, cid
    return None


def evaluate(rule, trajectories: Sequence[Trajectory]) -> Outcome:
    """Replay ``rule`` over ``trajectories``; cost in reasoning tokens.

    ``rule`` is a replay rule (``first_stop(tr)``) or a
    :class:`~reasonserve.certainindex.stopping.StoppingRule`, replayed through its
    incremental ``observe`` (:func:`online_first_stop`).
    """
    correct = cost = base_correct = base_cost = 0.0
    for tr in trajectories:
        base_correct += tr.final_correct
        base_cost += tr.tokens_used
        stop = rule.first_stop(tr) if hasattr(rule, "first_stop") else online_first_stop(rule, tr)
        if stop is None:
            correct += tr.final_correct
            cost += tr.tokens_used
        else:
            i, cid = stop
            correct += tr.class_correct[cid]
            cost += tr.positions[i]
    return Outcome(len(trajectories), correct, cost, base_correct, base_cost)
