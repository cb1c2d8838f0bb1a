"""Answer extraction and normalization for untrusted model output.

Extraction (:func:`extract_answer`): the last brace-balanced ``\\boxed{...}``, else the
text after the last "answer is", else the last number. :func:`extract_probe_answer`
is the probe-in-the-middle rule: the probe continues a ``\\boxed{`` prompt, so its
answer is the text up to the first unmatched ``}`` (empty if there is none).

Everything here is linear-time string work on bounded input: texts longer than
:data:`MAX_TEXT_CHARS` are cut to their last :data:`MAX_TEXT_CHARS` characters before
searching (answers sit at the end), answers longer than :data:`MAX_ANSWER_CHARS` are
left as they are (they will only compare equal to identical strings).
"""

from __future__ import annotations

import functools
import re
import unicodedata

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
MAX_ANSWER_CHARS = 1_000

_ANSWER_IS = re.compile(r"answer\s+is\s*[:：]?\s*", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_UNITS = (
    "units?|cm|centimeters?|m|meters?|km|kilometers?|mm|inch(?:es)?|in|feet|foot|ft|yards?|"
    "miles?|dollars?|cents?|degrees?|square|sq|cubic|hours?|minutes?|mins?|seconds?|secs?|"
    "days?|weeks?|years?|months?|people|students?|pounds?|lbs?|ounces?|oz|grams?|g|kg|"
    "liters?|ml|mph|percent|points?|ways|times|base|radians?"
)
_TRAILING_UNITS = re.compile(rf"(?:\s*(?:{_UNITS})\b\.?)+\s*$", re.IGNORECASE)
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_MATH_DELIMITERS = re.compile(r"^\\\((.*)\\\)$|^\\\[(.*)\\\]$", re.DOTALL)  # \( x \), \[ x \]
_ORDINAL = re.compile(r"(\d)\s*\^\s*\{\s*(?:\\text\s*\{)?(?:st|nd|rd|th)\}?\s*\}")  # 12^{\text{th}}
# "2000 \text{ calories}": a number followed by words in \text{} is the number (a unit).
_NUMBER_THEN_WORDS = re.compile(r"^(-?[\d.,]+)\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z ]*\}$")
# One pass over LaTeX escapes: a row break (two backslashes) is matched first and kept,
# so it never loses a backslash to a control space; set braces become plain braces (a set
# is then a bare list); spacing and sizing commands are dropped.
_LATEX_ESCAPES = re.compile(r"(\\\\)|\\([{}])|\\(?:(?:left|right|displaystyle)(?![a-zA-Z])|[!,;:\s])")
# "the answer is indeed 18": adverbs before a stated answer, and verdicts that are not answers.
_FILLER = re.compile(r"^(?:(?:indeed|definitely|clearly|actually|probably|likely|still|just|simply|"
                     r"then|therefore|thus|now|also)\b[\s,:]*)+", re.IGNORECASE)  # fmt: skip
_VERDICT = re.compile(r"^(?:(?:not\s+)?(?:correct|incorrect|right|wrong|valid|invalid|consistent|"
                      r"inconsistent|confirmed|verified)\s*(?:[.,;:!?)]|$)|"
                      r"(?:the\s+)?same\b|unchanged\b|as\s+follows\b)",
                      re.IGNORECASE)  # fmt: skip
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")


def _balanced_group(text: str, open_at: int) -> str | None:
    """The contents of the ``{...}`` group whose ``{`` is at ``open_at``, or None."""
    depth = 0
    for i in range(open_at, len(text)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    return None


def extract_boxed(text: str) -> str | None:
    """Contents of the last brace-balanced ``\\boxed{...}`` (or ``\\fbox{...}``), or None."""
    text = text[-MAX_TEXT_CHARS:]
    for cmd in ("\\boxed", "\\fbox"):
        end = len(text)
        while (at := text.rfind(cmd, 0, end)) != -1:
            rest = at + len(cmd)
            while rest < len(text) and text[rest] == " ":
                rest += 1
            if rest < len(text) and text[rest] == "{":
                inner = _balanced_group(text, rest)
                if inner is not None:
                    return inner.strip()
            elif rest < len(text):  # "\boxed 5"
                token = re.match(r"[^\s$.,]+", text[rest:])
                if token:
                    return token.group(0)
            end = at
    return None


def _after_answer_is(text: str) -> str | None:
    matches = list(_ANSWER_IS.finditer(text))
    last = matches[-1] if matches else None
    if last is None:
        return None
    tail = text[last.end() :].strip()
    line = re.split(r"\n|(?<!\d)\.(?!\d)|\.\s|\.$", tail, maxsplit=1)[0]
    return stated_answer(line)


def stated_answer(statement: str) -> str | None:
    """What follows "the answer is", or None when it is a verdict, not an answer.

    Leading adverbs go (``indeed 18`` -> ``18``); ``correct``, ``wrong``, ``consistent``
    and the like say something *about* an answer, so they yield None.
    """
    s = _FILLER.sub("", statement.strip()).strip().strip("$").strip()
    return None if not s or _VERDICT.match(s) else s


def extract_answer(text: str | None) -> str | None:
    """The final answer in a model's output, or None when there is none.

    Order: last ``\\boxed{}``; text after the last "answer is"; last number.
    """
    if not text:
        return None
    text = text[-MAX_TEXT_CHARS:]
    boxed = extract_boxed(text)
    if boxed:
        return boxed
    stated = _after_answer_is(text)
    if stated:
        return stated
    numbers = _NUMBER.findall(text[-10_000:])
    return numbers[-1].rstrip(",") if numbers else None


def extract_probe_answer(text: str | None) -> str:
    """Text up to the first unmatched ``}`` (the probe continues ``\\boxed{``), else ``""``."""
    if not text:
        return ""
    depth = 0
    for i, ch in enumerate(text[:MAX_TEXT_CHARS]):
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return text[:i].strip()
            depth -= 1
    return ""


def _unwrap_text_commands(s: str) -> str:
    for _ in range(4):  # nested \text{\textbf{...}} unwraps in a few rounds
        s, n = _TEXT_CMD.subn(r"\1", s)
        if n == 0:
            break
    return s


def _strip_outer(s: str) -> str:
    while len(s) >= 2 and s[0] == "{" and s[-1] == "}" and _balanced_group(s, 0) == s[1:-1]:
        s = s[1:-1].strip()
    return s


def normalize_answer(answer: str | None) -> str:
    """A canonical string form of an answer (empty for None); see :func:`_normalize`.

    Memoized for answers up to :data:`MAX_ANSWER_CHARS` (the function is pure): probe
    streams repeat the same few answers thousands of times.
    """
    if answer is None:
        return ""
    if not isinstance(answer, str):
        raise InvalidTypeError(f"answer must be a str or None, got {type(answer).__name__}")
    if len(answer) > MAX_ANSWER_CHARS:
        return _normalize(answer)
    return _normalize_cached(answer)


@functools.lru_cache(maxsize=65536)
def _normalize_cached(answer: str) -> str:
    return _normalize(answer)


def _normalize(answer: str) -> str:
    """A canonical string form of an answer (empty for None).

    Unicode NFKC (confusable digits and letters fold to ASCII forms), ``$``, ``\\(...\\)``
    and ``\\[...\\]`` delimiters, ordinal suffixes (``12^{th}``) and words in ``\\text{}``
    after a number dropped, set braces ``\\{ \\}`` -> ``{ }``, LaTeX spacing
    and sizing commands dropped (row breaks kept), ``\\text{}`` unwrapped,
    ``\\dfrac``/``\\tfrac`` -> ``\\frac``, degrees, ``%`` and trailing unit words removed,
    thousands separators and trailing ``.0`` dropped, ``x = 5`` and ``x \\in [a,b]`` -> the
    right-hand side, spaces removed.
    """
    if answer is None:
        return ""
    s = unicodedata.normalize("NFKC", answer).strip()
    if len(s) > MAX_ANSWER_CHARS:
        return s
    s = s.strip("$").strip()
    s = _MATH_DELIMITERS.sub(lambda m: m.group(1) or m.group(2) or "", s).strip()
    s = _ORDINAL.sub(r"\1", s)
    s = _NUMBER_THEN_WORDS.sub(r"\1", s)
    s = _LATEX_ESCAPES.sub(lambda m: m.group(1) or m.group(2) or "", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\$", "")
    s = re.sub(r"\^\s*\{?\\circ\}?|°|\\degree", "", s)
    s = s.replace("\\%", "").replace("%", "")
    s = _unwrap_text_commands(s)
    s = _TRAILING_UNITS.sub("", s) if re.search(r"\d", s) else s
    # "x = 5" -> "5"; "x \in [a,b]" -> "[a,b]"
    s = re.sub(r"^[a-zA-Z]\s*(?:=|\\in(?![a-zA-Z]))\s*(?=\S)", "", s)
    s = _strip_outer(s.strip())
    s = s.rstrip(".").strip()
    s = re.sub(r"\s+", "", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    s = re.sub(r"^(-?\d+)\.0+$", r"\1", s)
    s = re.sub(r"^(-?\d+\.\d*?)0+$", r"\1", s) if re.match(r"^-?\d+\.\d+$", s) else s
    return s
