"""The scheduling-policy protocol (re-exported from :mod:`reasonserve.core`).

Views, decisions and the protocol live in ``core`` so that every host (embedded engine,
simulator, adapters) shares them; see ``core/views.py`` and ``core/decisions.py``.
"""

from reasonserve.core.decisions import Abort, Admit, Decision, Migrate, Order, Preempt, Stop, TokenBudget
from reasonserve.core.policy import SchedulingPolicy, check_policy
from reasonserve.core.views import InstanceView, ProgramView, RequestView, SchedulerView

__all__ = [
    "Abort",
    "Admit",
    "Decision",
    "InstanceView",
    "Migrate",
    "Order",
    "Preempt",
    "ProgramView",
    "RequestView",
    "SchedulerView",
    "SchedulingPolicy",
    "Stop",
    "TokenBudget",
    "check_policy",
]
