"""Scheduling policies: pure ``decide(view) -> decisions`` objects.

Pass a policy object to the host (``Engine(model, config, policy=FCFSPolicy())``);
:data:`REGISTRY` maps names to factories for the CLI and configs only.
"""

from reasonserve.policies.app_fifo import AppFIFOPolicy
from reasonserve.policies.base import (
    Abort,
    Admit,
    Decision,
    InstanceView,
    Migrate,
    Order,
    Preempt,
    ProgramView,
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
from reasonserve.policies.pacer import TokenPacer
from reasonserve.policies.pascal import PascalPolicy
from reasonserve.policies.priority import PriorityPolicy
from reasonserve.policies.round_robin import RoundRobinPolicy
from reasonserve.policies.router import InstanceLoad, LeastKVRouter, PascalRouter, Router

#: Policies by name, for the CLI and configs.
REGISTRY = {"fcfs": FCFSPolicy, "round_robin": RoundRobinPolicy, "pascal": PascalPolicy,
            "dynasor": DynasorPolicy, "app_fifo": AppFIFOPolicy, "lpm": LPMPolicy,
            "flashtts_prefix": PrefixAwarePolicy, "priority": PriorityPolicy}  # fmt: skip

__all__ = [
    "REGISTRY",
    "Abort",
    "Admit",
    "AppFIFOPolicy",
    "Decision",
    "DynasorPolicy",
    "FCFSPolicy",
    "InstanceLoad",
    "InstanceView",
    "LPMPolicy",
    "LeastKVRouter",
    "LookaheadVerification",
    "Migrate",
    "Order",
    "PascalPolicy",
    "PascalRouter",
    "Preempt",
    "PrefixAwarePolicy",
    "PriorityPolicy",
    "ProgramView",
    "RequestView",
    "RooflineKVAllocator",
    "RoundRobinPolicy",
    "Router",
    "SchedulerView",
    "SchedulingPolicy",
    "SelectSpec",
    "Stop",
    "TokenBudget",
    "TokenPacer",
    "TwoPhaseSpeculation",
    "check_policy",
]
