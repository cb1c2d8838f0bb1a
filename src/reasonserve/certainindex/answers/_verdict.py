"""The three-way verdict of an answer comparison, and how verdicts combine."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

__all__ = ["Compare", "Verdict", "all_equal"]


class Verdict(enum.Enum):
    EQUAL = "equal"
    DIFFERENT = "different"
    UNKNOWN = "unknown"


Compare = Callable[[str, str], Verdict]  # compares two normalized answers


def all_equal(verdicts: Iterable[Verdict]) -> Verdict:
    """EQUAL when every verdict is; else UNKNOWN when any is unknown; else DIFFERENT."""
    seen = list(verdicts)
    if all(v is Verdict.EQUAL for v in seen):
        return Verdict.EQUAL
    return Verdict.UNKNOWN if Verdict.UNKNOWN in seen else Verdict.DIFFERENT
