"""First come, first served: admit by arrival, preempt the latest arrival first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.policies.base import Admit, Decision, Preempt, SchedulerView

__all__ = ["FCFSPolicy"]


@dataclass(frozen=True, slots=True)
class FCFSPolicy:
    name: str = "fcfs"

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        """Admit waiting requests oldest first; when the decode step would not fit in the
        free blocks, preempt the newest running requests until it does."""
        decisions: list[Decision] = []
        running = sorted(view.running, key=lambda r: (r.arrival_s, r.request_id))
        need = sum(1 for r in running if (r.num_computed_tokens % view.block_size) == 0)
        free = view.free_blocks
        while running and need > free:
            victim = running.pop()
            decisions.append(Preempt(victim.request_id))
            need -= int(victim.num_computed_tokens % view.block_size == 0)
            free += -(-victim.num_computed_tokens // view.block_size)
        waiting = sorted(view.waiting, key=lambda r: (r.arrival_s, r.request_id))
        decisions += [Admit(r.request_id) for r in waiting]
        return decisions
