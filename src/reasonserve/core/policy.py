"""The scheduling-policy protocol: ``decide(view) -> decisions``, pure and deterministic.

A policy is any object with a ``name`` and a ``decide(view)`` method. It never touches
the host; the host never decides order, admission or preemption itself. Ties must be
broken by request id so decisions do not depend on dict or arrival-list order.

Optional ``quiet_steps(view) -> int``, asked only after ``decide(view)`` returned no
decisions: how many consecutive steps, this one included, ``decide`` would also return
none if between steps every running request decodes one token (its KV blocks growing at
block boundaries, the free blocks shrinking by as much) and nothing else changes but
``now_s`` and ``step``. A host may then skip those calls. It must end such a stretch
itself at any other change (an arrival, a finish, a phase change) and before a step
whose running batch's growth does not fit the free blocks. Without the method: 1 (no
step is skipped); a policy that keeps state between calls must not define it.

Optional ``quiet_without_waiting: bool`` (a class attribute; default False): True
declares that ``decide`` returns no decisions on every view whose waiting queue is empty
and whose running requests all keep their seats with the blocks their pending tokens
need (``len(running) <= max_num_seqs`` and their ``blocks_needed`` sum to at most
``free_blocks``), whatever else the view holds (time, step, phases, quanta, pacer
state; block counts are the non-negative ones hosts build: with a negative
``blocks_needed`` the sum can fit while one request alone does not, and PASCAL then
preempts), and that ``quiet_steps`` on such a view would be :data:`QUIET_FOREVER`. A host
may then skip ``decide`` and ``quiet_steps`` at such steps (the simulator does; its
stepped mode still asks every step). Without it every step is asked as before; a policy
that keeps state between calls must not set it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from reasonserve.core.decisions import Decision
from reasonserve.core.errors import PolicyError
from reasonserve.core.views import SchedulerView

__all__ = [
    "QUIET_FOREVER",
    "SchedulingPolicy",
    "check_policy",
    "policy_name",
    "quiet_steps",
    "quiet_without_waiting",
]

QUIET_FOREVER = 2**62  # quiet_steps: no limit from the policy itself


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


def quiet_steps(policy: object, view: SchedulerView) -> int:
    """``policy.quiet_steps(view)``, or 1 when it has none; :class:`PolicyError` unless an int >= 1."""
    hook = getattr(policy, "quiet_steps", None)
    if hook is None:
        return 1
    if not callable(hook):
        raise PolicyError(f"policy {policy_name(policy)!r}: quiet_steps must be a method, got {hook!r}")
    steps = hook(view)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        name = policy_name(policy)
        raise PolicyError(f"policy {name!r}: quiet_steps must return an int >= 1, got {steps!r}")
    return steps


def quiet_without_waiting(policy: object) -> bool:
    """``policy.quiet_without_waiting``, or False when it has none; :class:`PolicyError`
    unless a bool."""
    flag = getattr(policy, "quiet_without_waiting", False)
    if not isinstance(flag, bool):
        name = policy_name(policy)
        raise PolicyError(f"policy {name!r}: quiet_without_waiting must be a bool, got {flag!r}")
    return flag
