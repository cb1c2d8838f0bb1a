"""Small value types and errors shared by every layer of reasonserve."""

from reasonserve.core.errors import (
    ImplementationUnavailableError,
    InvalidArgumentError,
    InvalidTypeError,
    ReasonserveError,
)

__all__ = [
    "ImplementationUnavailableError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "ReasonserveError",
]
