"""First come, first served (vLLM's default): admit by arrival while KV blocks and seats
last; when the running batch's growth does not fit, preempt the newest arrival first,
and admit nothing in a step that preempted.

With the host's columns (``SchedulerView.waiting_columns``) the waiting queue is ordered
by its arrival column (one numpy sort) and read lazily until admission stops."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from reasonserve.core.decisions import Decision, Preempt
from reasonserve.core.policy import QUIET_FOREVER
from reasonserve.core.views import SchedulerView
from reasonserve.policies._capacity import admit_in_order, growth
from reasonserve.policies._order import ordered, waiting_ordered

__all__ = ["FCFSPolicy"]


@dataclass(frozen=True, slots=True)
class FCFSPolicy:
    name: str = "fcfs"
    # nothing waiting and a growth that fits: no preemption, nothing to admit
    quiet_without_waiting: ClassVar[bool] = True  # see reasonserve.core.policy

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        running = ordered(view.running, "arrival_s")
        need, free = growth(running), view.free_blocks
        decisions: list[Decision] = []
        while running and need > free:
            victim = running.pop()
            decisions.append(Preempt(victim.request_id))
            need -= victim.blocks_needed
            free += victim.num_blocks
        if decisions:
            return decisions
        waiting = waiting_ordered(view, "arrival_s")  # admission stops at the first misfit
        return admit_in_order(view, waiting, free - need, view.max_num_seqs - len(running))

    def quiet_steps(self, view: SchedulerView) -> int:
        """No decision stays no decision while the batch only decodes and its growth fits:
        the blocks left for the first waiting request (free minus growth) only shrink."""
        return QUIET_FOREVER
