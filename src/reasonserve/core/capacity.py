"""The capacity check every host applies to a step's plan (the embedded engine's
``decision_check`` and the simulator's ``plan``): the requests that stay plus those
admitted fit the seats, and the blocks they need this step (growth of those staying, then
each admission in order) fit the free blocks plus those released by the requests leaving.
The host supplies its own block arithmetic; the rule is written once, here.

A module of the compiled set (:mod:`reasonserve.native`: the simulator checks every plan):
the host's values are typed ``Any``, read as Python reads them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from reasonserve.core.decisions import Admit

__all__ = ["check_capacity"]


def check_capacity(
    plan: Any,
    running: Sequence,
    *,
    max_num_seqs: Any,
    free_blocks: Any,
    released: Callable[[list], Any],
    growth: Callable[[Any], Any],
    admission_blocks: Callable[[Any], Any],
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
