"""Incremental features of a probe stream for early-exit rules (O(window) per probe).

:class:`FeatureState` reads one :class:`~.stopping.ProbeObservation` at a time and
returns the feature vector named by :data:`FEATURE_NAMES`, all after that probe:

* answer history (Dynasor's consistency; ES-CoT's run-length jumps): the tokens the
  current answer has held, its share of all answered probes, the number of distinct
  answers, the rate of answer changes, tokens since the current answer first
  appeared, the current run against the longest earlier run, recent churn and empty
  probes — long, churning trajectories ("going nowhere") show here;
* probe text (Dynasor's hesitation; a log-probability-free form of DEER's confidence):
  a hesitation word in the probe, and whether the text after the closing ``}`` ends the
  thought (``</think>``, end of text, ``**``, ``\\]``) or reopens it ("Wait", "But",
  "Let me");
* reasoning text since the previous probe: density of "wait"/"alternatively"/"hmm",
  a verification phrase after a stated answer that matches the probe, "let me try
  another approach";
* log-probabilities where the host gives them (DEER): the answer tokens' mean
  probability and P(``</think>``);
* the budget where the host gives it (its ``max_tokens``): the share of the budget
  spent, scale-free across budgets and models — a run near its budget that has not
  settled is likely to end unfinished and wrong, so exiting it costs little;
* the current answer's lead over the most frequent answer so far (0: it is the mode).

A signal that is not observed gives 0 with its ``*_seen`` indicator 0, so a model
fitted where a signal was missing ignores it.
"""

from __future__ import annotations

import math
import re
from collections import deque

from reasonserve.certainindex.answers.equivalence import AnswerClasses
from reasonserve.certainindex.answers.extract import extract_boxed, stated_answer
from reasonserve.certainindex.estimators.probe_consistency import HESITATION_WORDS
from reasonserve.certainindex.stopping.observation import MAX_COMPARED, ProbeObservation
from reasonserve.core.errors import InvalidArgumentError

__all__ = ["FEATURE_GROUPS", "FEATURE_NAMES", "FeatureState", "text_features"]

FEATURE_GROUPS = {  # the signal (stopping.SIGNALS) each feature reads, in vector order
    "answers": ("log_position", "log_run_tokens", "run_fraction", "share", "log_distinct", "change_rate",
                "log_age", "run_jump", "recent_empty", "answered", "recent_distinct", "mode_gap"),
    "probe_text": ("text_seen", "hesitant", "closes", "reopens"),
    "reasoning_text": ("tail_seen", "tail_hesitation", "tail_verifies", "tail_new_approach"),
    "logprobs": ("logprob_seen", "answer_confidence", "think_end_prob"),
    "budget": ("budget_seen", "budget_fraction"),
}  # fmt: skip
FEATURE_NAMES = tuple(name for names in FEATURE_GROUPS.values() for name in names)
_RECENT = 16
_SCALE = 1024.0  # tokens
_TEXT_CHARS = 4_000  # probe text and reasoning tails are read in their last this many characters
_HESITATE = re.compile(r"\b(?:" + "|".join(HESITATION_WORDS) + r")\b", re.IGNORECASE)
_CLOSE = re.compile(r"^\s*(?:\$|\\\]|\\\)|\.|,)*\s*(?:</think>|\*\*|$|\\\]\s*$)", re.IGNORECASE)
_REOPEN = re.compile(r"\b(?:wait|but|let me|hmm|alternatively|however|actually|no,|hold on)\b", re.IGNORECASE)
_TAIL_HESITATE = re.compile(r"\b(?:wait|alternatively|hmm)\b", re.IGNORECASE)
_WORD = re.compile(r"\S+")
_VERIFY = re.compile(r"\b(?:let me (?:verify|check|double[- ]check|confirm)|"
                     r"to (?:verify|confirm|double[- ]check)|"
                     r"(?:this|that|it) (?:is correct|matches)|checks? out|confirms?\b)", re.IGNORECASE)
_NEW_APPROACH = re.compile(r"\b(?:another (?:approach|way|method)|different (?:approach|method)|"
                           r"start over|from scratch|re-?examine|made a mistake)", re.IGNORECASE)  # fmt: skip


def text_features(text: str) -> tuple[float, float, float]:
    """(hesitant, closes, reopens) of a raw probe continuation (see module docstring)."""
    text = text[:_TEXT_CHARS]
    hesitant = float(_HESITATE.search(text) is not None)
    brace = _closing_brace(text)
    after = text[brace + 1 :] if brace >= 0 else ""
    closes = float(brace >= 0 and _CLOSE.match(after) is not None)
    reopens = float(_REOPEN.search(after) is not None)
    return hesitant, closes, reopens


def _closing_brace(text: str) -> int:
    """Index of the first unmatched ``}`` (the end of the probed answer), -1 if none."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return i
            depth -= 1
    return -1


def tail_features(tail: str, classes: AnswerClasses, cid: int) -> tuple[float, float, float]:
    """(hesitation words per 100 words, verification of the probe answer, new approach)."""
    tail = tail[-_TEXT_CHARS:]
    words = max(1, len(_WORD.findall(tail)))
    density = 100.0 * len(_TAIL_HESITATE.findall(tail)) / words
    verifies = 0.0
    match = _VERIFY.search(tail)
    if match and cid >= 0:
        before = tail[: match.start()]
        stated = extract_boxed(before) or _stated_before(before)
        verifies = float(bool(stated) and classes.add(stated) == cid)
    return density, verifies, float(_NEW_APPROACH.search(tail) is not None)


def _stated_before(text: str) -> str | None:
    at = text.lower().rfind("answer is")
    return stated_answer(text[at + 9 : at + 200]) if at >= 0 else None


class FeatureState:
    """One program's feature state (see module docstring); ``update`` returns the vector."""

    def __init__(self) -> None:
        self.classes = AnswerClasses(max_compared=MAX_COMPARED)
        self.current = -1
        self.current_answer: str | None = None
        self._run_start = self._interval = self._last_position = -1
        self._run, self._answered, self._changes, self._longest_other, self._top = 0, 0, 0, 0, 0
        self._counts: dict[int, int] = {}
        self._first_seen: dict[int, int] = {}
        self._recent: deque = deque(maxlen=_RECENT)

    def _see_position(self, position: int) -> None:
        if position < self._last_position:  # the history features take logs of position differences
            raise InvalidArgumentError(
                f"probe positions must not decrease within a program: {position} after {self._last_position}"
            )
        gap = position - self._last_position if self._last_position >= 0 else position
        if gap > 0:
            self._interval = gap if self._interval < 0 else min(self._interval, gap)
        self._last_position = position

    def _see_answer(self, cid: int, answer: str | None, position: int) -> None:
        self._recent.append(cid)
        if cid < 0:
            return
        self._answered += 1
        self._counts[cid] = self._counts.get(cid, 0) + 1
        self._top = max(self._top, self._counts[cid])  # the mode's count so far
        self._first_seen.setdefault(cid, position)
        if cid == self.current:
            self._run += 1
            return
        if self.current >= 0:
            self._changes += 1
            self._longest_other = max(self._longest_other, self._run)
        self.current, self.current_answer, self._run, self._run_start = cid, answer, 1, position

    def at_budget_end(self, obs: ProbeObservation) -> bool:
        """Is ``obs`` the last probe before the budget (the next one, an interval on, would pass it)?"""
        return obs.budget_tokens is not None and obs.position + max(self._interval, 1) >= obs.budget_tokens

    def update(self, obs: ProbeObservation) -> tuple[float, ...]:
        self._see_position(obs.position)
        cid = self.classes.add(obs.answer[:_TEXT_CHARS] if obs.answer else None)
        self._see_answer(cid, obs.answer, obs.position)
        return self._history(obs.position, cid) + self._text(obs, cid) + _logprobs(obs) + _budget(obs)

    def _history(self, position: int, cid: int) -> tuple[float, ...]:
        interval = max(self._interval, 1)
        pos = max(position, 1)
        held = (position - self._run_start + interval) if self.current >= 0 else 0
        answered = max(self._answered, 1)
        recent = [c for c in self._recent if c >= 0]
        return (
            math.log1p(position / _SCALE),
            math.log1p(held / _SCALE),
            min(1.0, held / pos),
            self._counts.get(self.current, 0) / answered,
            math.log1p(len(self._counts)),
            self._changes / answered,
            math.log1p((position - self._first_seen.get(self.current, position)) / _SCALE),
            math.log1p(self._run / (1 + self._longest_other)),
            sum(1 for c in self._recent if c < 0) / len(self._recent),
            float(cid >= 0),
            len(set(recent)) / _RECENT,
            (self._counts.get(self.current, 0) - self._top) / answered,
        )

    def _text(self, obs: ProbeObservation, cid: int) -> tuple[float, ...]:
        probe = (1.0, *text_features(obs.text)) if obs.text else (0.0, 0.0, 0.0, 0.0)
        if not obs.reasoning_tail:
            return (*probe, 0.0, 0.0, 0.0, 0.0)
        return (*probe, 1.0, *tail_features(obs.reasoning_tail, self.classes, cid))


def _logprobs(obs: ProbeObservation) -> tuple[float, float, float]:
    lps = obs.answer_logprobs
    end = obs.think_end_logprob
    if not lps and end is None:
        return 0.0, 0.0, 0.0
    confidence = math.exp(sum(lps) / len(lps)) if lps else 0.0
    return 1.0, confidence, math.exp(end) if end is not None else 0.0


def _budget(obs: ProbeObservation) -> tuple[float, float]:
    if obs.budget_tokens is None:
        return 0.0, 0.0
    return 1.0, min(1.0, obs.position / obs.budget_tokens)
