"""Answer extraction and normalization for untrusted model output.

Extraction (:func:`extract_answer`), first rule that finds something:

1. ``\\boxed{...}`` (or ``\\fbox``): the last top-level box, joined with the boxes
   just before it when only a short separator stands between them (``\\boxed{1}`` and
   ``\\boxed{2}`` -> ``1, 2``; a sentence end breaks the chain);
2. the value stated in a "Final Answer: ... is X" sentence (before rule 1 when it
   comes after the last box), else the text after the last "answer is" (a verdict such
   as "correct" is no answer);
3. the last math span (``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``) in the
   last :data:`MATH_TAIL_CHARS` characters, joined with the spans before it that are
   separated only by "," / "and" / "or";
4. the last number.

:func:`extract_probe_answer` is the probe-in-the-middle rule: the probe continues a
``\\boxed{`` prompt, so its answer is the text up to the first unmatched ``}``.

Every scan is a single left-to-right pass (no search restarts from each opening
brace), so extraction is linear in the input; texts longer than :data:`MAX_TEXT_CHARS`
are cut to their last :data:`MAX_TEXT_CHARS` characters first (answers sit at the end).
"""

from __future__ import annotations

import functools
import re

import numpy as np

from reasonserve.certainindex.answers import _normalize
from reasonserve.certainindex.answers._mathspans import chained, math_spans, top_level_boxes
from reasonserve.certainindex.answers._normalize import balanced_group
from reasonserve.core.errors import InvalidTypeError

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_TEXT_CHARS",
    "extract_answer",
    "extract_boxed",
    "extract_probe_answer",
    "normalize_answer",
    "stated_answer",
]

MAX_TEXT_CHARS = 200_000
MATH_TAIL_CHARS = 10_000  # math spans are looked for in the tail of the text only
MAX_ANSWER_CHARS = _normalize.MAX_ANSWER_CHARS

_ANSWER_IS = re.compile(r"answer\s+is\s*[:：]?\s*", re.IGNORECASE)
_NUMBER = re.compile(
    r"-?\\[dt]?frac\{-?\d+\}\{\d+\}|(?<![A-Za-z_])"
    r"(?:-?\d{1,3}(?: \d{3})+(?![\d,.])|-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+)"
)
# "Final Answer: The volume is 120. I hope it is correct."
_FINAL_ANSWER = re.compile(r"final answer\s*:", re.IGNORECASE)
_IS = re.compile(r"\bis\b\s*:?", re.IGNORECASE)
# "the answer is indeed 18": adverbs before a stated answer, and verdicts that are not answers.
_FILLER = re.compile(r"^(?:(?:indeed|definitely|clearly|actually|probably|likely|still|just|simply|"
                     r"then|therefore|thus|now|also)\b[\s,:]*)+", re.IGNORECASE)  # fmt: skip
_VERDICT = re.compile(r"^(?:(?:not\s+)?(?:correct|incorrect|right|wrong|valid|invalid|consistent|"
                      r"inconsistent|confirmed|verified)\s*(?:[.,;:!?)]|$)|"
                      r"(?:the\s+)?same\b|unchanged\b|as\s+follows\b)",
                      re.IGNORECASE)  # fmt: skip
_TEXT_GROUP = re.compile(r"\\text\s*\{([^{}]{0,40})\}")
_NAMED_BOX = re.compile(r"[a-zA-Z](?:_\{?\w{1,3}\}?)?\s*=\s*\$?\s*$")
_SEPARATOR_COMMAND = re.compile(r"\\(?:qquad|quad|[()\[\],;! ])")
_SPAN_SEPARATOR = re.compile(r"^\s*(?:,|,?\s*and|,?\s*or)?\s*$")


def _is_box_separator(gap: str) -> bool:
    """Between boxes of one multi-part answer: commas, "and", spacing, delimiters, <= 2 words."""
    gap = _NAMED_BOX.sub("", gap)  # "x_1 = \boxed{1} and x_2 = \boxed{2}"
    gap = _TEXT_GROUP.sub(lambda m: "#" if re.search(r"[\d=]", m.group(1)) else " ", gap)
    gap = _SEPARATOR_COMMAND.sub(" ", gap)
    if re.search(r"[^\sa-zA-Z,;$()]", gap):
        return False  # digits, "=", a sentence end, another command
    words = [w for w in re.findall(r"[a-zA-Z]+", gap) if w.lower() not in ("and", "or")]
    return len(words) <= 2


def extract_boxed(text: str) -> str | None:
    """The last top-level ``\\boxed{...}`` (or ``\\fbox{...}``) with its chained boxes, or None."""
    return _boxed_and_end(text[-MAX_TEXT_CHARS:])[0]


def _boxed_and_end(text: str) -> tuple[str | None, int]:
    boxes = top_level_boxes(text)
    if not boxes:
        return None, 0
    parts = [_unbox(p) for p in chained(text, boxes, _is_box_separator)]
    return (", ".join(parts) if len(parts) > 1 else parts[0]), boxes[-1][1]


def _unbox(answer: str) -> str:
    """``\\boxed{\\boxed{4}}`` -> ``4`` (at most three levels: each costs a scan)."""
    for _ in range(3):
        if not answer.startswith("\\boxed{") or balanced_group(answer, 6) != answer[7:-1]:
            break
        answer = answer[7:-1].strip()
    return answer


def _last_match(pattern: re.Pattern[str], text: str, word: str, tries: int = 64) -> re.Match | None:
    """The last match of ``pattern`` (which starts with ``word``), looking back from the end."""
    spellings, end = {word, word.capitalize(), word.title(), word.upper()}, len(text)
    for _ in range(tries):
        at = max(text.rfind(w, 0, end) for w in spellings)
        if at < 0:
            return None
        m = pattern.match(text, at)
        if m:
            return m
        end = at
    return None


def _after_answer_is(text: str) -> str | None:
    last = _last_match(_ANSWER_IS, text, "answer")
    if last is None:
        return None
    tail = text[last.end() : last.end() + 2000].strip()
    spans = math_spans(tail[:1000])
    if spans and spans[0][0] <= 2:  # the statement opens with a math span
        return stated_answer(tail[spans[0][0] : spans[0][1]])
    line = re.split(r"\n|(?<!\d)\.(?!\d)|\.\s|\.$", tail, maxsplit=1)[0]
    return stated_answer(line)


def _final_answer_sentence(text: str) -> str | None:
    """The value stated after "Final Answer:" (a math span, else the first number after "is")."""
    last = _last_match(_FINAL_ANSWER, text, "final answer")
    if last is None:
        return None
    segment = re.split(r"\n|I hope", text[last.end() : last.end() + 500], maxsplit=1)[0]
    tail = segment
    for is_match in _IS.finditer(segment):
        tail = segment[is_match.end() :]
    spans = math_spans(tail)
    if spans:
        return tail[spans[0][0] : spans[0][1]].strip() or None
    number = _NUMBER.search(tail)
    return number.group(0).rstrip(",") if number else None


def stated_answer(statement: str) -> str | None:
    """What follows "the answer is", or None when it is a verdict, not an answer.

    Leading adverbs go (``indeed 18`` -> ``18``); ``correct``, ``wrong``, ``consistent``
    and the like say something *about* an answer, so they yield None.
    """
    s = _FILLER.sub("", statement.strip()).strip().strip("$").strip()
    return None if not s or _VERDICT.match(s) else s


def _last_math(text: str) -> str | None:
    text = text[-MATH_TAIL_CHARS:]
    spans = [s for s in math_spans(text) if text[s[0] : s[1]].strip()]
    if not spans:
        return None
    parts = chained(text, spans, _SPAN_SEPARATOR)
    return ", ".join(p.strip() for p in parts) if len(parts) > 1 else parts[0].strip()


def extract_answer(text: str | None) -> str | None:
    """The final answer in a model's output, or None when there is none (see module doc)."""
    if not text:
        return None
    text = text[-MAX_TEXT_CHARS:]
    boxed, box_end = _boxed_and_end(text)
    final = _final_answer_sentence(text[box_end:])  # a "Final Answer:" after the last box wins
    if final or boxed:
        return final or boxed
    for rule in (_after_answer_is, _last_math):
        found = rule(text)
        if found:
            return found
    numbers = _NUMBER.findall(text[-10_000:])
    return numbers[-1].rstrip(",") if numbers else None


def extract_probe_answer(text: str | None) -> str:
    """Text up to the first unmatched ``}`` (the probe continues ``\\boxed{``), else ``""``."""
    if not text:
        return ""
    text = text[:MAX_TEXT_CHARS]
    if "}" not in text:
        return ""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    depth = np.cumsum((codes == ord("{")).astype(np.int32) - (codes == ord("}")))  # vectorized scan
    unmatched = np.flatnonzero(depth < 0)
    return text[: unmatched[0]].strip() if unmatched.size else ""


def normalize_answer(answer: str | None) -> str:
    """A canonical string form of an answer (empty for None); see :func:`_normalize.normalize`.

    Memoized for answers up to :data:`MAX_ANSWER_CHARS` (the function is pure): probe
    streams repeat the same few answers thousands of times.
    """
    if answer is None:
        return ""
    if not isinstance(answer, str):
        raise InvalidTypeError(f"answer must be a str or None, got {type(answer).__name__}")
    if len(answer) > MAX_ANSWER_CHARS:
        return answer.strip()
    return _normalize_cached(answer)


@functools.lru_cache(maxsize=65536)
def _normalize_cached(answer: str) -> str:
    return _normalize.normalize(answer)
