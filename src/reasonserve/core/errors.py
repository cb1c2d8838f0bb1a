"""Typed errors shared by every layer.

Every error a caller can cause derives from :class:`ReasonserveError` and from the
builtin it refines (``ValueError``/``TypeError``/``RuntimeError``), so code that
catches builtins keeps working.
"""

from __future__ import annotations

__all__ = [
    "ImplementationUnavailableError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "ReasonserveError",
]


class ReasonserveError(Exception):
    """Base class of all reasonserve errors."""


class InvalidArgumentError(ReasonserveError, ValueError):
    """An argument has the right type but a value that is not allowed.

    The message names the argument and says what is allowed.
    """


class InvalidTypeError(ReasonserveError, TypeError):
    """An argument has a type, dtype or device that is not allowed."""


class ImplementationUnavailableError(ReasonserveError, RuntimeError):
    """An implementation was requested explicitly (e.g. ``impl="triton"``) but cannot run here."""
