"""Turn a total priority ranking of live requests into Admit/Preempt decisions (pure helper).

Every ranked policy here (PASCAL, Dynasor, App-FIFO, LPM) differs only in the ranking;
the KV arithmetic is shared. Requests are taken best-first: a running request keeps its
seat if its held blocks plus its growth still fit the budget left by better-ranked
requests, otherwise it is preempted; a waiting request is admitted if its blocks fit.
Admission is head-of-line: after the first waiting request that does not fit, no later
one is admitted (so a large request is not starved by a stream of small ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from reasonserve.core.decisions import Admit, Decision, Preempt
from reasonserve.core.views import RequestView, SchedulerView

__all__ = ["decide_ranked", "decide_segments"]


def decide_ranked(
    view: SchedulerView, ranked: Iterable[RequestView], mode: str | None = None
) -> list[Decision]:
    """``ranked``: every request of ``view.running`` and ``view.waiting``, best first (an
    iterable: it is read only until admission is blocked and every running request is seen)."""
    running_ids = {r.request_id for r in view.running}
    unseen = len(running_ids)
    budget = view.free_blocks + sum(r.num_blocks for r in view.running)
    seats = view.max_num_seqs
    admits: list[Decision] = []
    preempts: list[Decision] = []
    blocked = False
    for r in ranked:
        if r.request_id in running_ids:
            unseen -= 1
            cost = r.num_blocks + r.blocks_needed
            if seats >= 1 and cost <= budget:
                budget, seats = budget - cost, seats - 1
            else:
                preempts.append(Preempt(r.request_id, mode))
        elif not blocked:
            if seats >= 1 and r.blocks_needed <= budget:
                admits.append(Admit(r.request_id))
                budget, seats = budget - r.blocks_needed, seats - 1
            else:
                blocked = True
        elif unseen == 0:
            break
    return preempts + admits


class _Fill:
    """The running state of one ranked fill: blocks and seats left, decisions so far."""

    def __init__(self, view: SchedulerView, mode: str | None) -> None:
        self.budget = view.free_blocks + sum(r.num_blocks for r in view.running)
        self.seats, self.mode, self.blocked = view.max_num_seqs, mode, False
        self.admits: list[Decision] = []
        self.preempts: list[Decision] = []

    def running(self, r: RequestView) -> None:
        cost = r.num_blocks + r.blocks_needed
        if self.seats >= 1 and cost <= self.budget:
            self.budget, self.seats = self.budget - cost, self.seats - 1
        else:
            self.preempts.append(Preempt(r.request_id, self.mode))

    def waiting(self, r: RequestView) -> None:
        if self.seats >= 1 and r.blocks_needed <= self.budget:
            self.admits.append(Admit(r.request_id))
            self.budget, self.seats = self.budget - r.blocks_needed, self.seats - 1
        else:
            self.blocked = True


def decide_segments(
    view: SchedulerView,
    segments: Iterable[tuple[Sequence[RequestView], Sequence[RequestView], Callable]],
    mode: str | None = None,
) -> list[Decision]:
    """:func:`decide_ranked` over a ranking given as segments, best segment first; each is
    (running, waiting, key) with both lists sorted by ``key`` and interleaved by it. Once
    admission is blocked the waiting lists are not read again, so a long queue costs its
    sort (C-level) rather than a Python loop over every request."""
    fill = _Fill(view, mode)
    for running, waiting, key in segments:
        i = j = 0
        while i < len(running):
            if not fill.blocked and j < len(waiting) and key(waiting[j]) < key(running[i]):
                fill.waiting(waiting[j])
                j += 1
            else:
                fill.running(running[i])
                i += 1
        while not fill.blocked and j < len(waiting):
            fill.waiting(waiting[j])
            j += 1
    return fill.preempts + fill.admits
