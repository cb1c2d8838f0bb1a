"""Loaders that turn search recordings into per-question sample streams.

* PRM beam search (``prm_beams/*.jsonl``): each question's beams are samples; a beam's
  answer is the last ``\\boxed{}`` of its completion, its reward the aggregate of its
  per-step PRM scores (``last`` by default, or ``min``/``mean``/``product``); a beam scored
  by one number takes that number, and one without a finite score has none (NaN).
* rStar MCTS (``mcts/rstar_*/answer_sheets``): each rollout is a sample; its answer is
  the last "The answer is X" (choice letter) or ``\\boxed{}`` of its final node, its
  reward the final node's value. Rollouts that end without an answer count as empty.

Both replay with the self-consistency rules of :mod:`reasonserve.replay.sc` (cost =
beams or rollouts drawn) and drive the simulator's program workloads. A recording that
does not have this shape is an :class:`InvalidArgumentError` naming the file (and line).
"""

from __future__ import annotations

import json
import math
import pathlib
import re

from reasonserve.certainindex import RewardCertainty, extract_answer
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.recordings.jsonl import read_jsonl
from reasonserve.recordings.sc import SCQuestion, make_question

__all__ = ["load_mcts", "load_prm_beams"]

_CHOICE = re.compile(r"answer is:?\s*\(?\s*([A-E])\s*\)?", re.IGNORECASE)
# a node's value: one number, then the end of the value ("1.2.3" or "..." is no value)
_VALUE = re.compile(r"'value':\s*(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(?:[,}]|$)")


def load_prm_beams(path: str | pathlib.Path, *, aggregate: str = "last") -> list[SCQuestion]:
    agg = RewardCertainty(aggregate)
    out = []
    for line_no, row in read_jsonl(path):
        where = f"{path}:{line_no}"
        if "completions" not in row or "answer" not in row:
            raise InvalidArgumentError(f"{where}: needs 'completions' and 'answer'")
        completions = row["completions"]
        if not isinstance(completions, list):
            raise InvalidArgumentError(
                f"{where}: 'completions' must be a list, got {type(completions).__name__}"
            )
        answers = [extract_answer(c) if isinstance(c, str) else None for c in completions]
        scores = row.get("scores") or [[] for _ in answers]
        if not isinstance(scores, list) or len(scores) != len(answers):
            raise InvalidArgumentError(f"{where}: 'scores' must list one entry per completion")
        rewards = [_beam_reward(agg, s, where) for s in scores]
        qid = str(row.get("unique_id", line_no - 1))
        out.append(make_question(qid, answers, rewards, str(row["answer"])))
    return out


def _beam_reward(agg: RewardCertainty, steps, where: str) -> float:
    """The aggregate of a beam's finite step scores; one number is one step; NaN if none."""
    if isinstance(steps, (int, float)) and not isinstance(steps, bool):
        steps = [steps]
    if not isinstance(steps, list):
        raise InvalidArgumentError(f"{where}: 'scores' entries must be lists of step scores or numbers")
    finite = [
        s for s in steps if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s)
    ]
    return agg.score(finite) if finite else math.nan


def _rollout_answer(rollout, where: str) -> tuple[str | None, float]:
    trace = rollout.get("trace") or {}
    if not isinstance(trace, dict):
        raise InvalidArgumentError(f"{where}: a rollout's 'trace' must be an object of numbered nodes")
    if not trace:
        return None, math.nan
    try:
        last = trace[max(trace, key=int)]
    except ValueError:
        raise InvalidArgumentError(
            f"{where}: a rollout's 'trace' must be numbered nodes, got {list(trace)[:4]}"
        ) from None
    if not isinstance(last, dict):
        raise InvalidArgumentError(f"{where}: a rollout's 'trace' nodes must be objects")
    text = str(last.get("direct_answer") or last.get("subanswer") or "")
    choice = _CHOICE.findall(text)
    answer = choice[-1] if choice else (extract_answer(text) if "boxed" in text else None)
    values = _VALUE.findall(text)
    return answer, float(values[-1]) if values else math.nan


def _read_json(path: pathlib.Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidArgumentError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"{path}: not readable JSON ({type(exc).__name__})") from None


def _rollout_id(rollout, where: str) -> int:
    if not isinstance(rollout, dict):
        raise InvalidArgumentError(f"{where}: must be a list of rollout objects")
    try:
        return int(rollout.get("rollout_id", 0))
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{where}: 'rollout_id' must be an integer") from None


def load_mcts(folder: str | pathlib.Path) -> list[SCQuestion]:
    root = pathlib.Path(folder) / "answer_sheets"
    if not root.is_dir():
        raise InvalidArgumentError(f"{folder} has no answer_sheets folder")
    out = []
    for answer_file in sorted(root.glob("Question * - Answer.json")):
        qid = answer_file.name.split(" - ")[0]
        sheet = _read_json(answer_file)
        if not isinstance(sheet, dict) or "gold_answer" not in sheet:
            raise InvalidArgumentError(f"{answer_file}: needs 'gold_answer'")
        rollout_file = root / f"{qid} - Rollout Solutions.json"
        rollouts = _read_json(rollout_file)
        if not isinstance(rollouts, list):
            raise InvalidArgumentError(f"{rollout_file}: must be a list of rollout objects")
        rollouts = sorted(rollouts, key=lambda r: _rollout_id(r, str(rollout_file)))
        pairs = [_rollout_answer(r, str(rollout_file)) for r in rollouts]
        out.append(
            make_question(qid, [a for a, _ in pairs], [v for _, v in pairs], str(sheet["gold_answer"]))
        )
    return out
