"""A canonical string form of one answer (see :func:`normalize`).

Every step is a linear scan or a regex without nested quantifiers over at most
:data:`MAX_ANSWER_CHARS` characters; longer answers are returned as they are (they
only ever compare equal to identical strings).
"""

from __future__ import annotations

import re
import unicodedata

MAX_ANSWER_CHARS = 1_000

_MATH_DELIMITERS = re.compile(r"^\\\((.*)\\\)$|^\\\[(.*)\\\]$", re.DOTALL)  # \( x \), \[ x \]
_ORDINAL = re.compile(r"(\d)\s*\^\s*\{\s*(?:\\text\s*\{)?(?:st|nd|rd|th)\}?\s*\}")  # 12^{\text{th}}
# One pass over LaTeX escapes: a row break (two backslashes) is matched first and kept,
# so it never loses a backslash to a control space; set braces become plain braces (a set
# is then a bare list); spacing and sizing commands are dropped.
_LATEX_ESCAPES = re.compile(
    r"(\\\\)|\\([{}])|\\(?:qquad|quad|(?:left|right|displaystyle|big|Big|bigg|Bigg)(?![a-zA-Z])|[!,;:\s])"
)
_TEXT_CMD = re.compile(
    r"\\(?:text|textbf|textit|textnormal|textrm|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}"
)
# "6 \text{ and } 8", "19, 46, and 82": a conjunction between items is a comma
_CONJUNCTION = re.compile(
    r"\s*,?\s*\\text\s*\{\s*(?:and|or)\s*\}\s*,?\s*|\s*,?\s+(?:and|or)\s+|(?<=[)\]])\s*(?:and|or)\s*(?=[(\[])"
)
_RELATIONS = (
    (re.compile(r"\\(?:leq?slant|leq?|le)(?![a-zA-Z])|≤|=<"), "<="),
    (re.compile(r"\\(?:geq?slant|geq?|ge)(?![a-zA-Z])|≥|=>"), ">="),
    (re.compile(r"\\(?:neq?)(?![a-zA-Z])|≠"), "!="),
    (re.compile(r"\\lt(?![a-zA-Z])"), "<"),
    (re.compile(r"\\gt(?![a-zA-Z])"), ">"),
)
# "x \in [a,b]": the interval
_MEMBER = re.compile(r"^[a-zA-Z](?:_\{?[a-zA-Z0-9]{1,3}\}?)?\s*\\in(?![a-zA-Z])\s*(?=\S)")
_ARRAY = re.compile(r"^\[?\s*\\begin\{array\}\{[lcr|]*\}(.*)\\end\{array\}\s*\]?$", re.DOTALL)
_PAREN_MATRIX = re.compile(r"^\((\\begin\{([pbB]?matrix)\}.*\\end\{\2\})\)$", re.DOTALL)
_THIN_THOUSANDS = re.compile(r",\\!\s*(?=\d{3}(?!\d))")  # 32,\!349
_UNITS = frozenset(
    (
        "unit", "units", "cm", "centimeter", "centimeters", "m", "meter", "meters", "km",
        "kilometer", "kilometers", "mm", "inch", "inches", "in", "feet", "foot", "ft", "yard",
        "yards", "mile", "miles", "dollar", "dollars", "cent", "cents", "degree", "degrees",
        "square", "sq", "cubic", "hour", "hours", "minute", "minutes", "min", "mins", "second",
        "seconds", "sec", "secs", "day", "days", "week", "weeks", "year", "years", "month",
        "months", "people", "students", "student", "pound", "pounds", "lb", "lbs", "ounce",
        "ounces", "oz", "gram", "grams", "g", "kg", "liter", "liters", "ml", "mph", "percent",
        "points", "point", "ways", "times", "base", "radian", "radians", "units", "cents"
    )
)
# "2000 \text{ calories}", "15\mbox{ cm}^2": words in a text command after a value are a unit
_TRAILING_TEXT_WORDS = re.compile(
    r"\\(?:text|textnormal|textrm|textbf|textit|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z ]*\}(?:\^\{?[23]\}?)?$"
)
_PERCENT_WORDS = frozenset(("percent", "percentage", "pct"))
_UNIT_POWER = re.compile(r"\^\s*\{?\s*[23]\s*\}?$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_DOUBLED_COMMAND = re.compile(r"(?<!\\)\\\\(?=[a-zA-Z])")
_BOXED = re.compile(r"^\\(?:boxed|fbox)\s*\{(.*)\}$", re.DOTALL)
_PLAIN_NUMBER = re.compile(r"-?[0-9]{1,300}(?:\.[0-9]{1,300})?")
_APPROX = re.compile(r"\\approx|≈")


def has_percent(raw: str) -> bool:
    """Whether an answer states a percentage (``%`` or a trailing percent word)."""
    if "%" in raw:
        return True
    tail = raw.rstrip(" .}$")[-12:].lower()
    return any(tail.endswith(w) for w in _PERCENT_WORDS)


def halve_backslashes(s: str) -> str:
    """``\\\\sqrt{5}`` (an escaped string) -> ``\\sqrt{5}``.

    Every run is halved when no backslash is single; else, outside matrices (where
    ``\\\\`` is a row break), a doubled backslash before a letter is a command.
    """
    if "\\\\" not in s:
        return s
    runs = [(m.end() - m.start(), m.end()) for m in re.finditer(r"\\+", s)]
    commands = [end < len(s) and s[end].isalpha() for _, end in runs]
    if not any(commands):
        return s
    if not any(n % 2 for n, _ in runs):
        return s.replace("\\\\", "\\")
    return s if "\\begin" in s else _DOUBLED_COMMAND.sub(r"\\", s)


def _unwrap_text_commands(s: str) -> str:
    for _ in range(4):  # nested \text{\textbf{...}} unwraps in a few rounds
        s, n = _TEXT_CMD.subn(r"\1", s)
        if n == 0:
            break
    return s


def balanced_group(text: str, open_at: int) -> str | None:
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


def _strip_outer(s: str) -> str:
    for _ in range(8):
        if not (len(s) >= 2 and s[0] == "{" and s[-1] == "}" and balanced_group(s, 0) == s[1:-1]):
            break
        s = s[1:-1].strip()
    return s


def _strip_trailing_units(s: str) -> str:
    """Drop up to four trailing unit words (``15 cm^2``, ``10 square feet``); linear."""
    for _ in range(4):
        body = _UNIT_POWER.sub("", s.rstrip(" .")) if "^" in s[-8:] else s.rstrip(" .")
        end = len(body)
        start = end
        while start > 0 and body[start - 1].isalpha():
            start -= 1
        word = body[start:end].lower()
        before = body[:start]
        if not word or (word not in _UNITS and word not in _PERCENT_WORDS) or not before.strip():
            return s
        if before[-1:].isalpha() or before[-1:] == "\\":
            return s  # part of a longer word or a command
        s = before.rstrip()
    return s


def _matrix_forms(s: str) -> str:
    """``\\left[\\begin{array}{cc}..\\end{array}\\right]`` and ``(\\begin{pmatrix}..)`` -> a matrix."""
    if "\\begin{array}" in s:
        s = _ARRAY.sub(r"\\begin{bmatrix}\1\\end{bmatrix}", s)
    return _PAREN_MATRIX.sub(r"\1", s) if s.startswith("(") else s


def normalize(answer: str) -> str:
    """A canonical string form of one answer.

    Unicode NFKC; escaped (doubled) backslashes halved; ``$``, ``\\(...\\)``,
    ``\\[...\\]``, a whole ``\\boxed{...}`` and an ``\\approx`` tail dropped; conjunctions between items
    (``6 \\text{ and } 8``) become commas; ordinal suffixes, LaTeX spacing and sizing,
    ``\\text{}``-like wrappers, degrees, ``%``, ``\\$`` and trailing unit words (with a
    power: ``cm^2``) dropped; ``\\dfrac``/``\\tfrac``/``\\cfrac`` -> ``\\frac``; ``\\le``,
    ``\\geq``... -> ``<=``, ``>=``; ``x \\in [a, b]`` -> the interval; array and
    parenthesized matrices -> matrices; thousands separators (``1,000``, ``14{,}916``; never ``32, 349``) and
    trailing zeros after the point dropped; spaces removed.
    """
    s = answer.strip()
    if _PLAIN_NUMBER.fullmatch(s):  # the common case: nothing else to do
        return _canonical_number(s)
    s = unicodedata.normalize("NFKC", s).strip()
    if len(s) > MAX_ANSWER_CHARS:
        return s
    s = halve_backslashes(s).strip().strip("$").strip()
    s = _MATH_DELIMITERS.sub(lambda m: m.group(1) or m.group(2) or "", s).strip()
    boxed = _BOXED.match(s)  # a probe that wrote a whole box: \boxed{-2}
    s = boxed.group(1).strip() if boxed and balanced_group(s, s.index("{")) == boxed.group(1) else s
    s = _approximation(s)
    s = _THIN_THOUSANDS.sub(",", s)
    s = _ORDINAL.sub(r"\1", s)
    s = _LATEX_ESCAPES.sub(lambda m: m.group(1) or m.group(2) or " ", s)
    s = s.replace("{,}", ",").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\cfrac", "\\frac").replace("\\$", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"\^\s*\{?\\circ\}?|°|\\degree", "", s)
    if re.search(r"\d", s):
        s = _CONJUNCTION.sub(",", s)
        unit = _TRAILING_TEXT_WORDS.search(s)
        s = s[: unit.start()].rstrip() if unit and re.search(r"\d", s[: unit.start()]) else s
        s = _strip_trailing_units(_unwrap_text_commands(s))
    else:
        s = _unwrap_text_commands(s)
    for pattern, replacement in _RELATIONS:
        s = pattern.sub(replacement, s)
    s = _strip_outer(s.strip().rstrip(".").strip())
    s = _MEMBER.sub("", s)
    return _canonical_number(_matrix_forms(_strip_outer(s.strip()).rstrip(".").strip()))


def _approximation(s: str) -> str:
    """``1/3 \\approx 0.33`` -> ``1/3``; ``x \\approx 11`` -> ``11`` (a bare name has no value)."""
    m = _APPROX.search(s)
    if m is None or m.start() == 0:
        return s
    before = s[: m.start()].strip()
    return s[m.end() :].strip() if re.fullmatch(r"[a-zA-Z](?:_\{?\w{1,3}\}?)?", before) else before


def _canonical_number(s: str) -> str:
    if _THOUSANDS.match(s):  # before spaces go: "32, 349" is a list of two numbers
        s = s.replace(",", "")
    s = re.sub(r"\s+", "", s)
    if re.match(r"^-?\d+\.\d+$", s):
        s = s.rstrip("0").rstrip(".")
    return s
