"""Linear scans for ``\\boxed{...}`` groups and math spans in model output.

Both scans walk the text once, left to right, with an explicit stack, so no input
(``\\boxed{`` repeated 100,000 times, unclosed delimiters) makes them restart a search
from every opening: time is linear in the text. Spans are ``(start, end)`` offsets
of their contents.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_BOX_OR_BRACE = re.compile(r"\\(?:boxed|fbox)\s*\{|\\(?:boxed|fbox) +(?=[^\s{])|\\[{}$]|[{}]")
_BARE_BOX_TOKEN = re.compile(r"[^\s$.,{}]+")
_DELIMITER = re.compile(r"\\\$|\$\$|\$|\\\(|\\\)|\\\[|\\\]|\n")
_CLOSES = {"$": "$", "$$": "$$", "\\(": "\\)", "\\[": "\\]"}
_INLINE = ("$", "\\(")  # a newline inside these ends the attempt (prose, not math)
_LEADING_CLOSER = re.compile(r"^(?:\}|\$\$|\$|\\\)|\\\])")
_TRAILING_OPENER = re.compile(r"(?:\\(?:boxed|fbox)\s*\{|\\(?:boxed|fbox) +|\$\$|\$|\\\(|\\\[)$")
MAX_GAP_CHARS = 200
MAX_BRACE_DEPTH = 256
BOX_TAIL_CHARS = 16_384


def top_level_boxes(text: str) -> list[tuple[int, int]]:
    """Contents of the closed ``\\boxed{...}`` not nested in another one, in order.

    Only the last boxes matter, so the scan looks at the last :data:`BOX_TAIL_CHARS`
    characters first and doubles the span until it finds a box (total work at most
    twice one scan of the text). A box that opened before the span is not seen; its
    inner boxes are. See :func:`_boxes_from` for the scan itself.
    """
    span = BOX_TAIL_CHARS
    while True:
        start = max(0, len(text) - span)
        boxes = _boxes_from(text, start)
        if boxes or start == 0:
            return boxes
        span *= 2


def _boxes_from(text: str, start: int) -> list[tuple[int, int]]:
    """Boxes in ``text[start:]``: one pass with a stack, from the first box on.

    Braces before the first box cannot change which boxes close, so the scan starts
    there; nesting deeper than :data:`MAX_BRACE_DEPTH` ends it (no answer is that deep).
    """
    found = [i for i in (text.find("\\boxed", start), text.find("\\fbox", start)) if i >= 0]
    if not found:
        return []
    first = min(found)
    stack: list[int | None] = []  # content start for a box's brace, None for a plain brace
    boxes: list[tuple[int, int]] = []
    for m in _BOX_OR_BRACE.finditer(text, first):
        if len(stack) > MAX_BRACE_DEPTH:
            break
        token = m.group(0)
        if token[0] == "\\" and token[1] in "{}$":
            continue  # an escaped brace or dollar
        if token == "{":
            stack.append(None)
        elif token == "}":
            opened = stack.pop() if stack else None
            if opened is not None:
                while boxes and boxes[-1][0] >= opened:
                    boxes.pop()  # boxes nested inside this one
                boxes.append((opened, m.start()))
        elif token.endswith("{"):
            stack.append(m.end())
        else:  # "\boxed 5": one bare token
            bare = _BARE_BOX_TOKEN.match(text, m.end())
            if bare and not stack:
                boxes.append((bare.start(), bare.end()))
    return boxes


def math_spans(text: str) -> list[tuple[int, int]]:
    """Contents of ``$...$``, ``$$...$$``, ``\\(...\\)`` and ``\\[...\\]`` spans, in order."""
    spans: list[tuple[int, int]] = []
    opener: str | None = None
    start = 0
    for m in _DELIMITER.finditer(text):
        token = m.group(0)
        if token == "\\$":
            continue
        if opener is None:
            if token in _CLOSES:
                opener, start = token, m.end()
        elif token == _CLOSES[opener]:
            spans.append((start, m.start()))
            opener = None
        elif token == "\n" and opener in _INLINE:
            opener = None
    return spans


def chained(
    text: str, spans: list[tuple[int, int]], separator: Callable[[str], bool] | re.Pattern[str]
) -> list[str]:
    """The last span's text and those before it joined to it by separator-only gaps.

    A gap is the text between two spans without their own delimiters; gaps longer than
    :data:`MAX_GAP_CHARS` never join, and at most 64 spans are joined.
    """
    is_separator = separator.match if isinstance(separator, re.Pattern) else separator
    last_start, last_end = spans[-1]
    parts = [text[last_start:last_end].strip()]
    for start, end in reversed(spans[:-1]):
        if len(parts) >= 64 or last_start - end > MAX_GAP_CHARS:
            break
        gap = _TRAILING_OPENER.sub("", _LEADING_CLOSER.sub("", text[end:last_start]))
        if not is_separator(gap):
            break
        parts.append(text[start:end].strip())
        last_start = start
    return parts[::-1]
