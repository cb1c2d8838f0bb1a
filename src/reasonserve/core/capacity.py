"""The capacity check every host applies to a step's plan (the embedded engine's
``decision_check`` and the simulator's ``plan``): the requests that stay plus those
admitted fit the seats, and the blocks they need this step (growth of those staying, then
each admission in order) fit the free blocks plus those released by the requests leaving.
The host supplies its own block arithmetic; the rule is written once, here."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol, TypeVar

from reasonserve.core.decisions import Admit

__all__ = ["check_capacity"]



class _Sequence(Protocol):
    @property
    def request_id(self) -> str: ...


S = TypeVar("S", bound=_Sequence)  # a host's sequence type


class _Plan(Protocol[S]):
    preempt: Collection[str]
    finish: Collection[str]
    admit: list[S]


def check_capacity(
    plan: _Plan[S],
    running: Sequence[S],
    *,
    max_num_seqs: int,
    free_blocks: int,
    released: Callable[[list[S]], int],
    growth: Callable[[S], int],
    admission_blocks: Callable[[S], int],
    bad: Callable[..., Exception],
) -> None:
    """``plan``: has ``preempt``/``finish`` (request ids leaving) and ``admit`` (sequences,
    in order). Raises ``bad(decision, reason)`` at the first admission that does not fit."""
    preempt, finish = plan.preempt, plan.finish
    if preempt or finish:
        leaving = [s for s in running if s.request_id in preempt or s.request_id in finish]
        staying = [s for s in running if s.request_id not in preempt and s.request_id not in finish]
    else:  # nothing leaves (a plan of admissions): one copy, no membership test per request
        leaving, staying = [], list(running)
    seats = len(staying) + len(plan.admit)
    if plan.admit and seats > max_num_seqs:
        raise bad(plan.admit[-1], f"makes {seats} running requests; max_num_seqs is {max_num_seqs}")
    need = sum(map(growth, staying))
    available = free_blocks + released(leaving)
    for seq in plan.admit:
        need += admission_blocks(seq)
        if need > available:
            raise bad(
                Admit(seq.request_id),
                f"needs {need} KV blocks in all with the running requests' growth; {available} are free",
            )
