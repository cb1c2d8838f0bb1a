"""``reasonserve replay sc``: early stopping of self-consistency on recorded samples.

Each question's samples are streamed in their recorded order. A rule reads the answers
(grouped by equivalence) and, where the file has them, reward-model scores, and stops
at sample ``n``; the answer is the majority so far (ties: higher mean reward, then the
earlier answer). Cost = samples drawn. Rules compared in the same run: first sample,
majority of all samples, stop-when-k-agree, entropy certainty, reward-gated first
sample, and the calibrated rule chosen by 5-fold cross-validation over questions.
The top-level numbers describe the headline setting: the shipped :data:`DEV_SETTING`
unless ``--setting`` names another (see :mod:`reasonserve.replay.settings`).
"""

from __future__ import annotations

import math
import pathlib
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reasonserve.certainindex.calibration import Outcome, choose, cross_validate
from reasonserve.certainindex.estimators.semantic_entropy import SemanticEntropy
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.recordings.sc import SCQuestion, load_samples, make_question
from reasonserve.replay import _report
from reasonserve.replay.sc_signals import signal_correlations
from reasonserve.replay.settings import SAMPLE_KEYS, resolve_setting

__all__ = [
    "DEV_SETTING",
    "SCQuestion",
    "SCRule",
    "headline_rule",
    "load_samples",
    "make_question",
    "replay_questions",
    "replay_sc",
]


@dataclass(frozen=True, slots=True)
class SCRule:
    """Stop at sample n when the enabled tests pass (see module docstring).

    ``agree``: some answer has at least this many votes; ``entropy``: semantic-entropy
    certainty >= this; ``reward_gate``: stop after the first sample when its reward is
    >= this; ``min_samples``: never stop on agreement/entropy before this many samples;
    ``max_samples``: stop at this many samples (None: all recorded).
    """

    agree: int | None = None
    entropy: float | None = None
    min_samples: int = 1
    reward_gate: float | None = None
    max_samples: int | None = None

    def __post_init__(self) -> None:
        for field, low in (("agree", 1), ("min_samples", 1), ("max_samples", 1)):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise InvalidArgumentError(f"{field} must be an integer >= {low}, got {value!r}")
        if self.entropy is not None and not 0.0 <= self.entropy <= 1.0:
            raise InvalidArgumentError(f"entropy threshold must lie in [0, 1], got {self.entropy!r}")
        if self.reward_gate is not None and not math.isfinite(self.reward_gate):
            raise InvalidArgumentError(f"reward gate must be finite, got {self.reward_gate!r}")

    @classmethod
    def from_setting(cls, setting: dict[str, int | float]) -> SCRule:
        """From parsed ``agree,entropy,min,reward,max`` pairs (:mod:`reasonserve.replay.settings`)."""

        def opt(key: str, kind: type):
            return None if key not in setting else kind(setting[key])

        return cls(agree=opt("agree", int), entropy=opt("entropy", float),
                   min_samples=int(setting.get("min", 1)), reward_gate=opt("reward", float),
                   max_samples=opt("max", int))  # fmt: skip

    @property
    def spec(self) -> str:
        """The ``--setting`` string that selects this rule."""
        named = (("agree", self.agree), ("entropy", self.entropy), ("reward", self.reward_gate),
                 ("max", self.max_samples))  # fmt: skip
        parts = [f"{k}={v!r}" for k, v in named if v is not None]
        if self.min_samples > 1:
            parts.append(f"min={self.min_samples}")
        return ",".join(parts) or "all"

    @property
    def name(self) -> str:
        parts = []
        if self.reward_gate is not None:
            parts.append(f"reward>={self.reward_gate:g} at 1")
        if self.agree is not None:
            parts.append(f"{self.agree} agree")
        if self.entropy is not None:
            parts.append(f"entropy>={self.entropy:g}")
        if self.min_samples > 1:
            parts.append(f"n>={self.min_samples}")
        if self.max_samples is not None:
            parts.append(f"max {self.max_samples}")
        return ", ".join(parts) or "never"

    def stops(self, n: int, votes: Counter, first_reward: float) -> bool:
        if self.max_samples is not None and n >= self.max_samples:
            return True
        if self.reward_gate is not None and n == 1 and first_reward >= self.reward_gate:
            return True
        if n < self.min_samples or (self.agree is None and self.entropy is None):
            return False
        if self.agree is not None and (not votes or max(votes.values()) < self.agree):
            return False
        if self.entropy is not None:
            certainty = SemanticEntropy().score([c for c, k in votes.items() for _ in range(k)])
            if certainty < self.entropy:
                return False
        return True


def _majority(votes: Counter, rewards: dict) -> int:
    def key(c):
        r = [x for x in rewards[c] if not math.isnan(x)]
        return (votes[c], sum(r) / len(r) if r else -math.inf)

    return max(votes, key=key) if votes else -1


def _run_one(rule: SCRule, q: SCQuestion) -> tuple[bool, int]:
    votes: Counter = Counter()
    rewards: dict = defaultdict(list)
    for n, (cid, r) in enumerate(zip(q.classes, q.rewards, strict=True), start=1):
        if cid >= 0:
            votes[cid] += 1
            rewards[cid].append(r)
        if rule.stops(n, votes, q.rewards[0]) or n == len(q.classes):
            best = _majority(votes, rewards)
            return best >= 0 and q.class_correct[best], n
    return False, 0


def evaluate(rule: SCRule, questions: Sequence[SCQuestion]) -> Outcome:
    """Replay ``rule``; the baseline is the majority of all samples."""
    correct = cost = base_correct = base_cost = 0.0
    everything = SCRule()
    for q in questions:
        ok, n = _run_one(rule, q)
        base_ok, base_n = _run_one(everything, q)
        correct, cost = correct + ok, cost + n
        base_correct, base_cost = base_correct + base_ok, base_cost + base_n
    return Outcome(len(questions), correct, cost, base_correct, base_cost)


def calibration_candidates(questions: Sequence[SCQuestion]) -> list[SCRule]:
    """Most conservative first; reward gates only where the file has rewards."""
    gates: list[float | None] = [None]
    observed = sorted(r for q in questions for r in q.rewards if not math.isnan(r))
    if observed:
        # Reward scales differ by model (logits, probabilities): gate at quantiles.
        gates += sorted({observed[int(f * (len(observed) - 1))] for f in (0.9, 0.75, 0.5, 0.35, 0.25)},
                        reverse=True)  # fmt: skip
    rules = [SCRule()]
    for gate in gates:
        rules += [
            SCRule(agree=3, reward_gate=gate),
            SCRule(entropy=0.6, min_samples=3, reward_gate=gate),
            SCRule(agree=2, reward_gate=gate),
            SCRule(entropy=1.0, min_samples=2, reward_gate=gate),
        ]
    return rules


# The setting chosen on every development file (the four ``sc_samples`` files, PRM beams,
# MCTS rollouts) at no accuracy loss. Reward gates are left out: their raw thresholds
# are on one reward model's scale and do not carry to another model's scores.
DEV_SETTING = SCRule(agree=2)


def headline_rule(setting: str) -> SCRule | None:
    """The rule a ``--setting`` string names (``None``: the calibrated rule)."""
    return resolve_setting(setting, SAMPLE_KEYS, DEV_SETTING, SCRule.from_setting)


def replay_sc(path: str | pathlib.Path, *, tolerance: float = 0.0, setting: str = "dev") -> dict:
    """Replay a ``sc_samples`` file (cost = samples)."""
    headline = headline_rule(setting)
    return replay_questions(load_samples(path), source=str(path), tolerance=tolerance, headline=headline)


def replay_questions(questions: Sequence[SCQuestion], *, source: str, tolerance: float = 0.0,
                     unit: str = "samples", headline: SCRule | None = DEV_SETTING,
                     progress: Callable[[int, int, str], None] | None = None) -> dict:  # fmt: skip
    """Compare the named rules, the headline setting and the cross-validated rule on ``questions``.

    The top-level numbers describe ``headline`` (a fixed rule), or the calibrated,
    out-of-sample rule when it is ``None``; ``calibrated`` always holds the latter.
    """
    if len(questions) < 5:
        raise InvalidArgumentError(f"{source}: need at least 5 questions, got {len(questions)}")
    folds = [list(questions[i::5]) for i in range(5)]
    candidates = calibration_candidates(questions)
    cv = cross_validate(candidates, evaluate, folds, tolerance, progress)
    chosen, _ = choose(candidates, evaluate, questions, tolerance)
    named = [("first sample", SCRule(max_samples=1)), ("majority of all (baseline)", SCRule()),
             ("stop when 2 agree", SCRule(agree=2)), ("stop when 3 agree", SCRule(agree=3)),
             ("entropy >= 0.6, n >= 3", SCRule(entropy=0.6, min_samples=3))]  # fmt: skip
    observed = sorted(r for q in questions for r in q.rewards if not math.isnan(r))
    if observed:
        median = observed[len(observed) // 2]
        named.append((f"reward >= median ({median:.3g}) at 1, else 2 agree",
                      SCRule(agree=2, reward_gate=median)))  # fmt: skip
    extra = [] if headline is None or headline in [r for _, r in named] else [
        (f"setting {headline.name}, fixed", headline)]  # fmt: skip
    outcomes = {r: evaluate(r, questions) for _, r in named + extra}  # each rule replayed once
    rows = [(n, outcomes[r]) for n, r in named] + [("calibrated, out-of-sample", cv.pooled)]
    rows += [(n, outcomes[r]) for n, r in extra]
    top = cv.pooled if headline is None else outcomes[headline]
    knob = max(1, min(4, min(len(q.classes) for q in questions) - 1))
    correlations = [c.as_dict() for c in signal_correlations(questions, knob=knob)]
    return {**top.as_dict(), "setting": "calibrated, out-of-sample" if headline is None else headline.name,
            "setting_spec": "calibrated" if headline is None else headline.spec,
            "calibrated": cv.pooled.as_dict(), "file": source, "questions": len(questions), "unit": unit,
            "tolerance": tolerance, "chosen_per_fold": [c.name for c in cv.choices], "chosen": chosen.name,
            "chosen_spec": chosen.spec,
            "rules": {n: o.as_dict() for n, o in rows},
            "signal_correlations": {"knob": knob, "signals": correlations}, "_rows": rows}  # fmt: skip


def _correlation_table(corr: dict, unit: str) -> str:
    lines = [f"signals at {corr['knob']} {unit} vs mean {unit} to solve (solvable questions):",
             "| signal | Pearson | Kendall tau-b | questions |", "|---|---|---|---|"]  # fmt: skip
    for c in corr["signals"]:
        fmt = [("-" if v is None else f"{v:+.3f}") for v in (c["pearson"], c["kendall"])]
        lines.append(f"| {c['signal']} | {fmt[0]} | {fmt[1]} | {c['questions']} |")
    return "\n".join(lines)


def print_and_save(report: dict, *, json_path: str | None, png_path: str | None, out) -> None:
    rows = report.pop("_rows")
    unit = report.get("unit", "samples")
    out.write(_report.table(f"replay: {report['questions']} questions from {report['file']}",
                            rows, unit) + "\n")  # fmt: skip
    out.write(f"calibrated choice per held-out fold: {report['chosen_per_fold']}\n")
    out.write(f"setting chosen on all {report['questions']} questions: {report['chosen']} "
              f"(--setting {report['chosen_spec']})\n")  # fmt: skip
    out.write(f"headline (top-level JSON): {report['setting']}: accuracy {report['accuracy']:.4f} vs "
              f"{report['baseline_accuracy']:.4f} at {report['cost']:.2f} {unit} vs "
              f"{report['baseline_cost']:.2f}\n")  # fmt: skip
    out.write(_correlation_table(report["signal_correlations"], unit) + "\n")
    if json_path:
        _report.write_json(json_path, report)
    if png_path:
        _report.plot(png_path, f"replay: accuracy vs {unit}", [], rows, unit)
