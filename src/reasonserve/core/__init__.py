"""Small value types and errors shared by every layer of reasonserve."""

from reasonserve.core.column_store import ColumnStore
from reasonserve.core.columns import QueueColumns, columns_of
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
    "ColumnStore",
    "ImplementationUnavailableError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "Phase",
    "PolicyError",
    "QueueColumns",
    "ReasonserveError",
    "UnknownRequestError",
    "columns_of",
]
