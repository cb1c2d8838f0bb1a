"""Scheduling policies: pure ``decide(view) -> decisions`` objects, looked up by name."""

from reasonserve.policies.base import Admit, Decision, Preempt, RequestView, SchedulerView, SchedulingPolicy
from reasonserve.policies.fcfs import FCFSPolicy

#: Policies by name, for the CLI and configs.
REGISTRY = {"fcfs": FCFSPolicy}

__all__ = ["REGISTRY", "Admit", "Decision", "FCFSPolicy", "Preempt", "RequestView", "SchedulerView",
           "SchedulingPolicy"]  # fmt: skip
