"""The scheduling-policy protocol: ``decide(view) -> decisions``, pure and deterministic.

A policy is any object with a ``name`` and a ``decide(view)`` method. It never touches
the host; the host never decides order, admission or preemption itself. Ties must be
broken by request id so decisions do not depend on dict or arrival-list order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from reasonserve.core.decisions import Decision
from reasonserve.core.errors import PolicyError
from reasonserve.core.views import SchedulerView

__all__ = ["SchedulingPolicy", "check_policy", "policy_name"]


@runtime_checkable
class SchedulingPolicy(Protocol):
    name: str

    def decide(self, view: SchedulerView) -> Sequence[Decision]: ...


def policy_name(policy: object) -> str:
    return str(getattr(policy, "name", type(policy).__name__))


def check_policy(policy: object) -> SchedulingPolicy:
    """The policy itself, or :class:`PolicyError` if it has no callable ``decide``."""
    if not callable(getattr(policy, "decide", None)):
        raise PolicyError(
            f"policy {policy_name(policy)!r} ({type(policy).__name__}) has no decide(view) method"
        )
    return policy  # type: ignore[return-value]  # decide() checked above
