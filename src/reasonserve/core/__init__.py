"""Small value types and errors shared by every layer of reasonserve."""

from reasonserve.core.errors import (
    ImplementationUnavailableError,
    InvalidArgumentError,
    InvalidTypeError,
    PolicyError,
    ReasonserveError,
    UnknownRequestError,
)
from reasonserve.core.phase import Phase

__all__ = [
    "ImplementationUnavailableError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "Phase",
    "PolicyError",
    "ReasonserveError",
    "UnknownRequestError",
]
