"""``reasonserve replay cot``: text-only probing of recorded reasoning traces.

No model is run: at every ``probe_interval_tokens`` the answer the trace would give if
cut there is read from the text. Exactly:

* tokens are counted with one fixed rule for every trace: each maximal run of word
  characters (``\\w+``) is one token and each other non-space character is one token
  (the recorded models' tokenizers are not available offline; costs are reported in
  these units for the cut points and for the full traces alike);
* the answer at a cut is the latest answer that is *complete* in the prefix: the
  last brace-balanced ``\\boxed{...}`` or the text after the last "answer is" (to the
  end of its line or sentence), whichever ends later. Bare numbers are not answers
  here: inside reasoning they are mostly intermediate values;
* the full-trace baseline answers the recorded final answer;
* each probe carries the reasoning text since the previous probe (``Trajectory.tails``),
  for stopping rules that read the reasoning text.

The trajectories then go through the same rules and cross-validated calibration as
``replay probes``, so text probing and real probing can be compared on the same models.
"""

from __future__ import annotations

import bisect
import pathlib
import re

from reasonserve.certainindex.answers import extract_boxed, normalize_answer, stated_answer
from reasonserve.certainindex.answers.equivalence import AnswerClasses, equivalent
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.recordings.jsonl import read_jsonl
from reasonserve.replay.probe_rules import TokenWindowRule
from reasonserve.replay.probe_runs import Trajectory, _runs

__all__ = ["DEV_SETTING", "load_traces", "trace_trajectory"]

# The setting `reasonserve calibrate cot` chooses on the development traces (456
# Qwen3-8B texts, tolerance 0.5 points): text probes need a longer agreement span than
# real probes (``replay.probes.DEV_SETTING``), since a trace restates early guesses.
DEV_SETTING = TokenWindowRule(3712, 2048)

_TOKEN = re.compile(r"\w+|[^\w\s]")
_ANSWER_IS = re.compile(r"answer\s+is\s*:?\s*([^\n]*?)(?:\.\s|\.?\n|\.?$)", re.IGNORECASE)


def _answers_by_end(text: str) -> list[tuple[int, str]]:
    """(end offset, answer) of every complete answer statement in ``text``, by end."""
    found = []
    start = 0
    while (at := text.find("\\boxed", start)) != -1:
        inner = extract_boxed(text[: _group_end(text, at)])
        end = _group_end(text, at)
        if inner:
            found.append((end, inner))
        start = at + 6
    for m in _ANSWER_IS.finditer(text):
        answer = stated_answer(m.group(1))
        if answer and normalize_answer(answer):
            found.append((m.end(), answer))
    return sorted(found)


def _group_end(text: str, at: int) -> int:
    """End offset of the ``\\boxed{...}`` group starting at ``at`` (or ``at+6`` if none)."""
    i = text.find("{", at)
    if i == -1 or i > at + 8:
        return at + 6
    depth = 0
    for j in range(i, min(len(text), i + 5000)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    return at + 6


def trace_trajectory(key, run: str, text: str, final_answer: str | None, target: str,
                     interval_tokens: int) -> Trajectory:  # fmt: skip
    token_ends = [m.end() for m in _TOKEN.finditer(text)]
    answers = _answers_by_end(text)
    ends = [e for e, _ in answers]
    classes = AnswerClasses()
    positions, counted, raw, tails = [], [], [], []
    for t in range(interval_tokens, len(token_ends), interval_tokens):
        i = bisect.bisect_right(ends, token_ends[t - 1]) - 1
        raw.append(answers[i][1] if i >= 0 else None)
        since = token_ends[t - interval_tokens - 1] if t > interval_tokens else 0
        tails.append(text[since : token_ends[t - 1]])
        counted.append(classes.add(raw[-1]))
        positions.append(t)
    final_cid = classes.add(final_answer) if final_answer else -1
    correct = tuple(equivalent(classes.representative(c), target) for c in range(len(classes)))
    run_at, current_at = _runs(counted)
    return Trajectory(key, run, target, len(token_ends), final_cid,
                      bool(final_answer) and equivalent(final_answer, target), False, tuple(positions),
                      tuple(counted), tuple(counted), correct, run_at, current_at,
                      interval=interval_tokens, answers=tuple(raw), tails=tuple(tails))  # fmt: skip


def load_traces(path: str | pathlib.Path, *, interval_tokens: int = 64) -> list[Trajectory]:
    """Traces from ``reasoning_traces/``: SkyThought (``code[0]``, ``gt``, ``pred``) or
    full-text files (``full_text``, ``target``, ``final_answer``)."""
    path = pathlib.Path(path)
    if interval_tokens < 1:
        raise InvalidArgumentError(f"interval_tokens must be >= 1, got {interval_tokens}")
    out = []
    for line_no, row in read_jsonl(path):
        if "full_text" in row:
            text, final, target = row["full_text"], row.get("final_answer"), row.get("target")
        elif "code" in row:
            text, final, target = (row["code"] or [""])[0], row.get("pred"), row.get("gt")
        else:
            raise InvalidArgumentError(f"{path}:{line_no}: needs 'full_text' or 'code'")
        if isinstance(final, list):  # SkyThought stores one prediction per sample
            final = final[0] if final else None
        final = final if isinstance(final, str) else None
        text = "" if text is None else text
        if not isinstance(text, str) or target is None:
            raise InvalidArgumentError(f"{path}:{line_no}: needs a text and a target")
        problem = row.get("problem_id", row.get("idx", line_no - 1))
        key = (path.stem, str(problem), str(row.get("rollout_id", 0)))
        out.append(trace_trajectory(key, path.stem, text, final, str(target), interval_tokens))
    return out
