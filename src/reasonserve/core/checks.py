"""Argument checks shared by every layer: each raises :class:`InvalidArgumentError` with
the argument's name, the rule and the value given. ``bool`` is never taken for a number."""

from __future__ import annotations

import math
from typing import TypeGuard

from reasonserve.core.errors import InvalidArgumentError

__all__ = ["check_int", "check_int_in", "check_positive"]


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: object, low: int) -> None:
    """``value`` is an int >= ``low``."""
    if not _is_int(value) or value < low:
        raise InvalidArgumentError(f"{name} must be an int >= {low}, got {value!r}")


def check_int_in(name: str, value: object, low: int, high: int) -> None:
    """``value`` is an int in ``[low, high]``."""
    if not _is_int(value) or not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be an int in [{low}, {high}], got {value!r}")


def check_positive(name: str, value: object) -> None:
    """``value`` is a finite number > 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidArgumentError(f"{name} must be a finite number > 0, got {value!r}")
