"""Loaders that turn search recordings into per-question sample streams.

* PRM beam search (``prm_beams/*.jsonl``): each question's beams are samples; a beam's
  answer is the last ``\\boxed{}`` of its completion, its reward the aggregate of its
  per-step PRM scores (``last`` by default, or ``min``/``mean``/``product``).
* rStar MCTS (``mcts/rstar_*/answer_sheets``): each rollout is a sample; its answer is
  the last "The answer is X" (choice letter) or ``\\boxed{}`` of its final node, its
  reward the final node's value. Rollouts that end without an answer count as empty.

Both replay with the self-consistency rules of :mod:`reasonserve.replay.sc` (cost =
beams or rollouts drawn) and drive the simulator's program workloads.
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
_VALUE = re.compile(r"'value':\s*(-?[0-9.]+(?:e-?\d+)?)")


def load_prm_beams(path: str | pathlib.Path, *, aggregate: str = "last") -> list[SCQuestion]:
    agg = RewardCertainty(aggregate)
    out = []
    for line_no, row in read_jsonl(path):
        if "completions" not in row or "answer" not in row:
            raise InvalidArgumentError(f"{path}:{line_no}: needs 'completions' and 'answer'")
        answers = [extract_answer(c) if isinstance(c, str) else None for c in row["completions"]]
        scores = row.get("scores") or [[] for _ in answers]
        rewards = [agg.score(s) if s else math.nan for s in scores]
        qid = str(row.get("unique_id", line_no - 1))
        out.append(make_question(qid, answers, rewards, str(row["answer"])))
    return out


def _rollout_answer(rollout: dict) -> tuple[str | None, float]:
    trace = rollout.get("trace") or {}
    if not trace:
        return None, math.nan
    last = trace[max(trace, key=lambda k: int(k))]
    text = str(last.get("direct_answer") or last.get("subanswer") or "")
    choice = _CHOICE.findall(text)
    answer = choice[-1] if choice else (extract_answer(text) if "boxed" in text else None)
    values = _VALUE.findall(text)
    return answer, float(values[-1]) if values else math.nan


def load_mcts(folder: str | pathlib.Path) -> list[SCQuestion]:
    root = pathlib.Path(folder) / "answer_sheets"
    if not root.is_dir():
        raise InvalidArgumentError(f"{folder} has no answer_sheets folder")
    out = []
    for answer_file in sorted(root.glob("Question * - Answer.json")):
        qid = answer_file.name.split(" - ")[0]
        gold = str(json.loads(answer_file.read_text())["gold_answer"])
        rollouts = json.loads((root / f"{qid} - Rollout Solutions.json").read_text())
        rollouts.sort(key=lambda r: int(r.get("rollout_id", 0)))
        pairs = [_rollout_answer(r) for r in rollouts]
        out.append(make_question(qid, [a for a, _ in pairs], [v for _, v in pairs], gold))
    return out
