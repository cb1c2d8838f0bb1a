"""Round-robin with a token quantum: a running request that has computed ``quantum``
tokens since it was admitted yields its seat (preempted with ``mode``) while others
wait; the waiting queue is served in the order requests (re-)entered it (with the host's
columns, ``SchedulerView.waiting_columns``, ordered by its enqueue-time column and read
lazily until admission stops)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from reasonserve.core.decisions import Decision, Preempt
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.policy import QUIET_FOREVER
from reasonserve.core.views import SchedulerView
from reasonserve.policies._capacity import admit_in_order, growth
from reasonserve.policies._order import ordered, waiting_ordered

__all__ = ["RoundRobinPolicy"]


@dataclass(frozen=True, slots=True)
class RoundRobinPolicy:
    quantum: int = 64
    mode: str | None = "swap"  # keep the KV of a request that yields; None: the host's mode
    name: str = "round_robin"
    # nothing waiting: no quantum expires into a turn change; a growth that fits: no preemption
    quiet_without_waiting: ClassVar[bool] = True  # see reasonserve.core.policy

    def __post_init__(self) -> None:
        if not isinstance(self.quantum, int) or isinstance(self.quantum, bool) or self.quantum < 1:
            raise InvalidArgumentError(f"quantum must be an int >= 1, got {self.quantum!r}")
        if self.mode not in (None, "recompute", "swap"):
            raise InvalidArgumentError(f"mode must be None, 'recompute' or 'swap', got {self.mode!r}")

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        # Oldest turn first; the request that has used the most of its quantum yields first.
        running = ordered(view.running, "enqueued_s")
        waiting = waiting_ordered(view, "enqueued_s")  # read lazily, until admission stops
        decisions: list[Decision] = []
        free = view.free_blocks
        if view.waiting:
            expired = [r for r in running if r.quantum_used >= self.quantum]
            for r in expired:
                decisions.append(Preempt(r.request_id, self.mode))
                free += r.num_blocks
            running = [r for r in running if r.quantum_used < self.quantum]
        need = growth(running)
        by_quantum = sorted(running, key=lambda r: (-r.quantum_used, r.request_id))
        while by_quantum and need > free:
            victim = by_quantum.pop(0)
            decisions.append(Preempt(victim.request_id, self.mode))
            running.remove(victim)
            need -= victim.blocks_needed
            free += victim.num_blocks
        decisions += admit_in_order(view, waiting, free - need, view.max_num_seqs - len(running))
        return decisions

    def quiet_steps(self, view: SchedulerView) -> int:
        """With requests waiting, until the first running request's quantum expires (the
        blocks left for admission only shrink while the batch decodes); else no limit."""
        if not view.waiting:
            return QUIET_FOREVER
        return max(1, min((self.quantum - r.quantum_used for r in view.running), default=QUIET_FOREVER))
