"""The estimators' threshold check (ints and positive numbers: :mod:`reasonserve.core.checks`)."""

from __future__ import annotations

from reasonserve.core.errors import InvalidArgumentError


def check_threshold(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise InvalidArgumentError(f"{name} must be a number in [0, 1], got {value!r}")
