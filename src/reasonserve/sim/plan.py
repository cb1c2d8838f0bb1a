"""Validation of a policy's decisions in the simulator (same contract as the engine's
``decision_check``: every decision refers to a live request in the right queue, none
moves a request twice, and admissions plus the growth of the requests that keep running
fit the free blocks plus what preemptions release; otherwise :class:`PolicyError` and
nothing is applied)."""

from __future__ import annotations

from collections.abc import Iterable

from reasonserve.core.capacity import check_capacity
from reasonserve.core.decisions import PREEMPT_MODES, Abort, Admit, Migrate, Order, Preempt, Stop, TokenBudget
from reasonserve.core.errors import PolicyError
from reasonserve.sim.workload import as_count

__all__ = ["SimPlan", "check_plan"]


class SimPlan:
    """A step's checked decisions."""

    __slots__ = ("admit", "budgets", "finish", "order", "preempt")

    def __init__(self) -> None:
        self.admit: list = []
        self.preempt: dict[str, str | None] = {}
        self.finish: dict[str, str] = {}  # id -> "stop" | "abort"
        self.order: tuple[str, ...] = ()
        self.budgets: dict[str, int] = {}

    @property
    def empty(self) -> bool:
        return not (self.admit or self.preempt or self.finish or self.order or self.budgets)

    def moved(self, rid: str) -> bool:
        return rid in self.preempt or rid in self.finish or any(s.request_id == rid for s in self.admit)


def check_plan(decisions: Iterable, inst, name: str) -> SimPlan:
    plan = SimPlan()
    if isinstance(decisions, (list, tuple)) and not decisions:
        return plan  # nothing to check: an empty plan always fits

    def bad(d, why: str) -> PolicyError:
        return PolicyError(f"policy {name!r}: decision {d!r} {why}; no decision was applied")

    def live(d, want: str):
        seq = inst.by_id.get(d.request_id)
        if seq is None or seq.status != want:
            raise bad(d, f"needs a {want} request")
        if plan.moved(d.request_id):
            raise bad(d, "names a request another decision already moves")
        return seq

    for d in decisions:
        # a hostile policy's field values get a PolicyError here, never a TypeError
        if isinstance(d, (Admit, Preempt, Stop, Abort, TokenBudget)) and not isinstance(d.request_id, str):
            raise bad(d, "has a request id that is not a str")
        if isinstance(d, Admit):
            plan.admit.append(live(d, "waiting"))
        elif isinstance(d, Preempt):
            live(d, "running")
            mode = d.mode
            if not (mode is None or isinstance(mode, str)) or mode not in PREEMPT_MODES:
                raise bad(d, f"has mode {mode!r}; allowed: {PREEMPT_MODES}")
            plan.preempt[d.request_id] = mode
        elif isinstance(d, (Stop, Abort)):
            seq = inst.by_id.get(d.request_id)
            if seq is None or plan.moved(d.request_id):
                raise bad(d, "names an unknown or already moved request")
            plan.finish[d.request_id] = "stop" if isinstance(d, Stop) else "abort"
        elif isinstance(d, Order):
            ids = d.request_ids
            if not isinstance(ids, (tuple, list)) or not all(isinstance(r, str) for r in ids):
                raise bad(d, "needs a tuple of request ids (str)")
            if plan.order or any(getattr(inst.by_id.get(r), "status", None) != "running" for r in ids):
                raise bad(d, "is a second Order or orders a request that is not running")
            plan.order = tuple(dict.fromkeys(ids))
        elif isinstance(d, TokenBudget):
            tokens = as_count(d.tokens)
            running = getattr(inst.by_id.get(d.request_id), "status", None) == "running"
            if not running or tokens is None or tokens < 0:
                raise bad(d, "names a request that is not running or has a budget that is not an int >= 0")
            plan.budgets[d.request_id] = tokens
        elif isinstance(d, Migrate):
            raise bad(d, "migration is not simulated yet")
        else:
            raise bad(d, "is not a decision")
    size = inst.config.block_size

    def growth(s) -> int:  # max(0, inst.blocks_for(s.num_tokens) - s.num_blocks), without the calls
        more = -(-(s.prompt_tokens + s.num_output) // size) - s.num_blocks
        return more if more > 0 else 0

    check_capacity(plan, inst.running, max_num_seqs=inst.config.max_num_seqs, free_blocks=inst.free_blocks,
                   released=lambda seqs: sum(s.num_blocks for s in seqs), growth=growth,
                   admission_blocks=inst.admission_blocks, bad=bad)  # fmt: skip
    return plan
