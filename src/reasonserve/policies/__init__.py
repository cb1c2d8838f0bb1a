"""Scheduling policies: pure ``decide(view) -> decisions`` objects.

Pass a policy object to the host (``Engine(model, config, policy=FCFSPolicy())``);
:data:`REGISTRY` maps names to factories for the CLI and configs only.
"""

from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.base import (
    Abort,
    Admit,
    Decision,
    Migrate,
    Order,
    Preempt,
    RequestView,
    SchedulerView,
    SchedulingPolicy,
    Stop,
    TokenBudget,
    check_policy,
)
from reasonserve.policies.dynasor import DynasorPolicy
from reasonserve.policies.fcfs import FCFSPolicy
from reasonserve.policies.flashtts import (
    LookaheadVerification,
    PrefixAwarePolicy,
    RooflineKVAllocator,
    SelectSpec,
    TwoPhaseSpeculation,
)
from reasonserve.policies.lpm import LPMPolicy
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.priority import PriorityPolicy
from reasonserve.policies.round_robin import RoundRobinPolicy

#: Policies by name, for the CLI and configs.
REGISTRY = {"fcfs": FCFSPolicy, "round_robin": RoundRobinPolicy, "pascal": PascalPolicy,
            "dynasor": DynasorPolicy, "app_fifo": AppFIFOPolicy, "lpm": LPMPolicy,
            "flashtts_prefix": PrefixAwarePolicy, "priority": PriorityPolicy}  # fmt: skip

__all__ = [
    "REGISTRY",
    "Abort",
    "Admit",
    "Decision",
    "FCFSPolicy",
    "LookaheadVerification",
    "Migrate",
    "Order",
    "Preempt",
    "PrefixAwarePolicy",
    "PriorityPolicy",
    "RequestView",
    "RooflineKVAllocator",
    "RoundRobinPolicy",
    "SchedulerView",
    "SchedulingPolicy",
    "SelectSpec",
    "Stop",
    "TokenBudget",
    "TwoPhaseSpeculation",
    "check_policy",
]
