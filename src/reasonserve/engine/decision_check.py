"""Validation of a policy's decisions against the scheduler's state, before any is applied.

A rejected list raises :class:`PolicyError` naming the policy and the decision, and the
state is untouched (nothing has been applied yet). Capacity is checked exactly: the
admitted requests' blocks plus the growth of the requests that keep running must fit
the free blocks plus the blocks the preempted/stopped requests release.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from reasonserve.core.capacity import check_capacity
from reasonserve.core.decisions import PREEMPT_MODES, Abort, Admit, Migrate, Order, Preempt, Stop, TokenBudget
from reasonserve.core.errors import PolicyError
from reasonserve.engine.sequence import Sequence

__all__ = ["Plan", "check_decisions"]


@dataclass
class Plan:
    """The validated decisions of one step."""

    admit: list[Sequence] = field(default_factory=list)
    preempt: dict[str, str | None] = field(default_factory=dict)  # id -> mode
    finish: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (finish_reason, reason)
    order: tuple[str, ...] = ()
    budgets: dict[str, int] = field(default_factory=dict)


def check_decisions(decisions: Iterable, sched, policy_name: str) -> Plan:
    """``sched`` is the :class:`~reasonserve.engine.scheduler.Scheduler` (read only here)."""
    plan, seen_order = Plan(), False

    def bad(decision, why: str) -> PolicyError:
        return PolicyError(f"policy {policy_name!r}: decision {decision!r} {why}; no decision was applied")

    def live(decision, rid, want: tuple[str, ...]) -> Sequence:
        seq = sched.by_id.get(rid) if isinstance(rid, str) else None
        if seq is None:
            raise bad(decision, "names an unknown request id")
        if seq.status not in want:
            raise bad(decision, f"needs a {' or '.join(want)} request, but it is {seq.status}")
        if rid in plan.preempt or rid in plan.finish or any(s.request_id == rid for s in plan.admit):
            raise bad(decision, "names a request another decision already moves")
        return seq

    for d in decisions:
        if isinstance(d, Admit):
            plan.admit.append(live(d, d.request_id, ("waiting",)))
        elif isinstance(d, Preempt):
            live(d, d.request_id, ("running",))
            if d.mode not in PREEMPT_MODES:
                raise bad(d, f"has mode {d.mode!r}; allowed: {PREEMPT_MODES}")
            plan.preempt[d.request_id] = d.mode
        elif isinstance(d, (Stop, Abort)):
            live(d, d.request_id, ("waiting", "running"))
            plan.finish[d.request_id] = ("stop" if isinstance(d, Stop) else "abort", str(d.reason))
        elif isinstance(d, Order):
            ids = tuple(d.request_ids)
            if seen_order or len(set(ids)) != len(ids):
                raise bad(d, "repeats an id, or is the second Order of the step")
            for rid in ids:
                if getattr(sched.by_id.get(rid), "status", None) != "running":
                    raise bad(d, f"orders {rid!r}, which is not running")
            plan.order, seen_order = ids, True
        elif isinstance(d, TokenBudget):
            if d.request_id in plan.budgets:
                raise bad(d, "repeats a request id")
            if getattr(sched.by_id.get(d.request_id), "status", None) != "running":
                raise bad(d, "names a request that is not running")
            if not isinstance(d.tokens, int) or isinstance(d.tokens, bool) or d.tokens < 0:
                raise bad(d, "needs tokens to be an int >= 0")
            plan.budgets[d.request_id] = d.tokens
        elif isinstance(d, Migrate):
            raise bad(d, "needs a multi-instance host; the embedded engine is one instance")
        else:
            raise bad(d, "is not a decision (Admit, Preempt, Order, TokenBudget, Stop, Abort, Migrate)")
    check_capacity(plan, sched.running, max_num_seqs=sched.max_num_seqs, free_blocks=sched.blocks.num_free,
                   released=lambda seqs: sched.blocks.released_by([s.block_table for s in seqs]),
                   growth=sched.view_growth, admission_blocks=sched.admission_blocks, bad=bad)  # fmt: skip
    return plan
