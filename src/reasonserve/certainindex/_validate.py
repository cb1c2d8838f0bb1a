"""Shared argument checks for the estimators."""

from __future__ import annotations

import math

from reasonserve.core.errors import InvalidArgumentError


def check_threshold(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise InvalidArgumentError(f"{name} must be a number in [0, 1], got {value!r}")


def check_window(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")


def check_positive(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a finite number > 0, got {value!r}")
