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
    "PolicyError",
    "ReasonserveError",
    "UnknownRequestError",
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


class UnknownRequestError(ReasonserveError, KeyError):
    """A request id that is not live (never added, or already finished and returned)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PolicyError(ReasonserveError, ValueError):
    """A scheduling policy object is malformed or returned a decision the host cannot apply
    (unknown id, wrong queue, over capacity). The message names the policy and the decision;
    the host's state is unchanged."""
