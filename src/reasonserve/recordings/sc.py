"""Self-consistency recordings (``sc_samples/*.jsonl``): each question's sampled answers,
grouped by equivalence and graded against its gold answer, with the samples' rewards and
lengths where the file has them."""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass

from reasonserve.certainindex import equivalent, group_answers
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.recordings.jsonl import read_jsonl

__all__ = ["SCQuestion", "load_samples", "make_question"]


@dataclass(frozen=True, slots=True)
class SCQuestion:
    qid: str
    classes: tuple[int, ...]  # per sample, -1 = no answer
    class_correct: tuple[bool, ...]
    rewards: tuple[float, ...]  # per sample, NaN when missing
    lengths: tuple[float, ...] = ()  # per sample (tokens, else words), NaN when missing; () = none


def _number(value) -> float:
    """A finite float, else NaN (missing, malformed, NaN/inf)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return math.nan
    return x if math.isfinite(x) else math.nan


def _reward(value) -> float:
    """A sample's reward; a list of step scores counts by its last step."""
    if isinstance(value, list):
        value = value[-1] if value else None
    return _number(value)


def make_question(
    qid: str, answers: list[str | None], rewards: list[float], gold: str, lengths: list[float] | None = None
) -> SCQuestion:
    """Group a question's answers by equivalence and grade each group against ``gold``."""
    if len(rewards) != len(answers):
        raise InvalidArgumentError(f"question {qid}: {len(rewards)} rewards for {len(answers)} answers")
    classes = group_answers(answers)
    reps = {c: a for c, a in zip(classes, answers, strict=True) if c >= 0}
    correct = tuple(equivalent(reps[c], gold) for c in range(len(reps)))
    if lengths is not None and len(lengths) != len(answers):
        raise InvalidArgumentError(f"question {qid}: {len(lengths)} lengths for {len(answers)} answers")
    return SCQuestion(qid, tuple(classes), correct, tuple(rewards), tuple(lengths or ()))


def _lengths(row: dict, n: int) -> list[float] | None:
    """Per-sample length: recorded ``tokens``, else whitespace words of ``response``."""
    if isinstance(row.get("tokens"), list) and len(row["tokens"]) == n:
        return [_number(t) for t in row["tokens"]]
    if isinstance(row.get("response"), list) and len(row["response"]) == n:
        return [float(len(r.split())) if isinstance(r, str) else math.nan for r in row["response"]]
    return None


def load_samples(path: str | pathlib.Path) -> list[SCQuestion]:
    """Read a ``sc_samples`` JSONL file: ``gt``, ``pred[n]``, optional ``pred_score[n]``."""
    out = []
    for line_no, row in read_jsonl(path):
        if "pred" not in row or "gt" not in row or not isinstance(row["pred"], list):
            raise InvalidArgumentError(f"{path}:{line_no}: needs 'gt' and a list 'pred'")
        preds = [p if isinstance(p, str) else None for p in row["pred"]]
        scores = row.get("pred_score") or [None] * len(preds)
        if not isinstance(scores, list) or len(scores) != len(preds):
            raise InvalidArgumentError(f"{path}:{line_no}: 'pred_score' must list one score per 'pred'")
        rewards = [_reward(s) for s in scores]
        lengths = _lengths(row, len(preds))
        out.append(make_question(str(row.get("idx", line_no - 1)), preds, rewards, str(row["gt"]), lengths))
    return out
