"""Which self-consistency signal predicts the compute a question needs (SPEC 1.6).

Dynasor (App. B.3) reads each signal at a detection point ("detect@knob": after the
first ``knob`` samples) and correlates it with the question's ground-truth compute
need, the mean number of samples until self-consistency settles on the right answer;
it reports Pearson 0.68 / Kendall 0.61 for semantic entropy. Here, on recorded
samples:

* ``steps to solve`` for one order of the samples: the smallest ``k`` such that the
  majority of the first ``k`` samples is correct and stays correct for every larger
  ``k`` (majority ties go to the answer seen first; empty answers do not vote).
  Averaged over ``orders`` random orders. Only *solvable* questions count: a correct
  answer holds strictly more votes than any other over all samples, so every order
  settles by the last sample.
* signals, from the first ``knob`` samples *in recorded order* (what a server sees at
  the detection point; averaging them over orders would make them a function of all
  samples, like the steps, and the correlation close to tautological): normalized
  semantic entropy (``1 - certainty``), mean length of those samples
  (tokens where the file records them), mean reward-model score (where recorded).
  Mean normalized log-probability, the paper's third signal, is not in any recording.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reasonserve.certainindex.estimators.semantic_entropy import SemanticEntropy
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.replay._stats import kendall_tau_b, pearson

if TYPE_CHECKING:  # sc imports this module
    from reasonserve.recordings.sc import SCQuestion

__all__ = ["SignalCorrelation", "majority_settled_at", "signal_correlations"]


@dataclass(frozen=True, slots=True)
class SignalCorrelation:
    signal: str
    pearson: float | None
    kendall: float | None
    questions: int

    def as_dict(self) -> dict:
        return {"signal": self.signal, "pearson": self.pearson, "kendall": self.kendall,
                "questions": self.questions}  # fmt: skip


def majority_settled_at(classes: Sequence[int], class_correct: Sequence[bool]) -> int | None:
    """Smallest ``k`` after which the running majority is correct for good (None: never)."""
    votes: Counter = Counter()
    first_seen: dict[int, int] = {}
    settled = None
    for k, cid in enumerate(classes, start=1):
        if cid >= 0:
            votes[cid] += 1
            first_seen.setdefault(cid, k)
        best = max(votes, key=lambda c: (votes[c], -first_seen[c])) if votes else -1
        ok = best >= 0 and class_correct[best]
        settled = (settled or k) if ok else None
    return settled


def _solvable(q: SCQuestion) -> bool:
    votes = Counter(c for c in q.classes if c >= 0)
    if not votes:
        return False
    top = max(votes.values())
    leaders = [c for c, v in votes.items() if v == top]
    return len(leaders) == 1 and q.class_correct[leaders[0]]


def _signals(q: SCQuestion, knob: int) -> dict[str, float]:
    head = range(knob)
    out = {"semantic entropy": 1.0 - SemanticEntropy().score([q.classes[i] for i in head])}
    # A signal counts for a question only when every sample records it, so a question
    # never mixes recorded and missing values.
    if q.lengths and not any(math.isnan(x) for x in q.lengths):
        out["mean length"] = sum(q.lengths[i] for i in head) / len(head)
    if q.rewards and not any(math.isnan(x) for x in q.rewards):
        out["mean reward"] = sum(q.rewards[i] for i in head) / len(head)
    return out


def signal_correlations(
    questions: Sequence[SCQuestion], *, knob: int, orders: int = 64, seed: int = 0
) -> list[SignalCorrelation]:
    """Correlation of each signal at ``knob`` samples with the mean steps to solve."""
    if knob < 1:
        raise InvalidArgumentError(f"knob must be >= 1, got {knob}")
    if orders < 1:
        raise InvalidArgumentError(f"orders must be >= 1, got {orders}")
    rng = random.Random(seed)
    steps: list[float] = []
    signals: dict[str, list[tuple[int, float]]] = {}
    for q in questions:
        n = len(q.classes)
        if n < knob or not _solvable(q):
            continue
        total_steps = 0.0
        for _ in range(orders):
            order = rng.sample(range(n), n)
            settled = majority_settled_at([q.classes[i] for i in order], q.class_correct)
            total_steps += settled if settled is not None else n  # unreachable for solvable q
        for name, value in _signals(q, knob).items():
            signals.setdefault(name, []).append((len(steps), value))
        steps.append(total_steps / orders)
    out = []
    for name, pairs in signals.items():
        xs = [v for _, v in pairs]
        ys = [steps[i] for i, _ in pairs]
        out.append(SignalCorrelation(name, pearson(xs, ys), kendall_tau_b(xs, ys), len(pairs)))
    return out
