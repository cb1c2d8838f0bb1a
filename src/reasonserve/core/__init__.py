"""Small value types and errors shared by every layer of reasonserve: phases, the views a
policy decides on, the decisions it returns, the policy protocol and typed errors."""

from reasonserve.core.column_store import ColumnStore
from reasonserve.core.columns import QueueColumns, columns_of
from reasonserve.core.decisions import Abort, Admit, Decision, Migrate, Order, Preempt, Stop, TokenBudget
from reasonserve.core.errors import (
    ImplementationUnavailableError,
    InvalidArgumentError,
    InvalidTypeError,
    PolicyError,
    ReasonserveError,
    UnknownRequestError,
)
from reasonserve.core.phase import Phase
from reasonserve.core.policy import SchedulingPolicy, check_policy
from reasonserve.core.views import InstanceView, ProgramView, RequestView, SchedulerView

__all__ = [
    "Abort",
    "Admit",
    "ColumnStore",
    "Decision",
    "ImplementationUnavailableError",
    "InstanceView",
    "InvalidArgumentError",
    "InvalidTypeError",
    "Migrate",
    "Order",
    "Phase",
    "PolicyError",
    "Preempt",
    "ProgramView",
    "QueueColumns",
    "ReasonserveError",
    "RequestView",
    "SchedulerView",
    "SchedulingPolicy",
    "Stop",
    "TokenBudget",
    "UnknownRequestError",
    "check_policy",
    "columns_of",
]
