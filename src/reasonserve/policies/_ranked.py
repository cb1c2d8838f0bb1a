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
from itertools import chain
from operator import add, attrgetter
from typing import TYPE_CHECKING

import numpy as np

from reasonserve.core.decisions import Admit, Decision, Preempt
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._order import BY_ID

if TYPE_CHECKING:
    from reasonserve.policies._programs import Programs

__all__ = ["Fill", "Segment", "all_fit", "decide_programs", "decide_ranked", "decide_running_first",
           "decide_segments"]  # fmt: skip

# one segment of a ranking: (running requests, waiting requests, the key both are sorted by)
Segment = tuple[Sequence[RequestView], Iterable[RequestView], Callable[[RequestView], tuple]]

_NUM_BLOCKS = attrgetter("num_blocks")
_BLOCKS_NEEDED = attrgetter("blocks_needed")
_RUN = 4  # running requests below which one at a time beats summing them


def decide_ranked(
    view: SchedulerView, ranked: Iterable[RequestView], mode: str | None = None
) -> list[Decision]:
    """``ranked``: every request of ``view.running`` and ``view.waiting``, best first (an
    iterable: it is read only until admission is blocked and every running request is seen)."""
    running_ids = set(map(BY_ID, view.running))
    unseen = len(running_ids)
    budget = view.free_blocks + sum(map(_NUM_BLOCKS, view.running))
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


def decide_running_first(
    view: SchedulerView,
    running: Sequence[RequestView],
    waiting: Iterable[RequestView],
    mode: str | None = None,
) -> list[Decision]:
    """:func:`decide_ranked` over ``running`` (every running request, best first) then
    ``waiting`` (read lazily). When every running request keeps its seat their order
    cannot change a decision: then waiting requests are admitted with what is left."""
    fill = Fill(view, mode)
    if not _all_fit(fill, running):
        return decide_ranked(view, chain(running, waiting), mode)
    for r in waiting:
        fill.waiting(r)
        if fill.blocked:
            break
    return fill.admits


class Fill:
    """The running state of one ranked fill: blocks and seats left, decisions so far."""

    def __init__(self, view: SchedulerView, mode: str | None) -> None:
        self.budget = view.free_blocks + sum(map(_NUM_BLOCKS, view.running))
        self.seats, self.mode, self.blocked = view.max_num_seqs, mode, False
        self.admits: list[Decision] = []
        self.preempts: list[Decision] = []

    def running(self, r: RequestView) -> None:
        cost = r.num_blocks + r.blocks_needed
        if self.seats >= 1 and cost <= self.budget:
            self.budget, self.seats = self.budget - cost, self.seats - 1
        else:
            self.preempts.append(Preempt(r.request_id, self.mode))

    def running_many(self, running: Sequence[RequestView]) -> None:
        """:meth:`running` for each, in order; at once when none can keep its seat."""
        if not running:
            return
        if self.seats >= 1 and self.budget >= min(
            map(add, map(_NUM_BLOCKS, running), map(_BLOCKS_NEEDED, running))
        ):
            for r in running:
                self.running(r)
        else:
            mode = self.mode
            self.preempts += [Preempt(rid, mode) for rid in map(BY_ID, running)]

    def running_run(self, running: Sequence[RequestView]) -> None:
        """:meth:`running` for each, in order; at once when they all keep their seats (no
        negative cost, and together they fit: then so does each in turn)."""
        if len(running) < _RUN:
            for r in running:
                self.running(r)
            return
        costs = list(map(add, map(_NUM_BLOCKS, running), map(_BLOCKS_NEEDED, running)))
        total = sum(costs)
        if len(running) <= self.seats and total <= self.budget and min(costs) >= 0:
            self.budget, self.seats = self.budget - total, self.seats - len(running)
        else:
            for r in running:
                self.running(r)

    def waiting(self, r: RequestView) -> None:
        if self.seats >= 1 and r.blocks_needed <= self.budget:
            self.admits.append(Admit(r.request_id))
            self.budget, self.seats = self.budget - r.blocks_needed, self.seats - 1
        else:
            self.blocked = True


def decide_segments(
    view: SchedulerView,
    segments: Iterable[Segment],
    mode: str | None = None,
) -> list[Decision]:
    """:func:`decide_ranked` over a ranking given as segments, best segment first; each is
    (running, waiting, key) with both sorted by ``key`` and interleaved by it (waiting: any
    iterable, read lazily). Once admission is blocked the waiting iterables are not read
    again, so a long queue costs its sort (C-level) rather than a Python loop over it."""
    fill = Fill(view, mode)
    fill_segments(fill, segments)
    return fill.preempts + fill.admits


def fill_segments(fill: Fill, segments: Iterable[Segment]) -> None:
    """:func:`decide_segments`'s fill into ``fill`` (a host of several head-of-line blocks
    resets ``fill.blocked`` between calls). The running requests after the last waiting
    one read (admission blocked, or the waiting ones all read) are taken as a run
    (:meth:`Fill.running_run`)."""
    for running, waiting, key in segments:
        queued = iter(waiting)
        nxt = None if fill.blocked else next(queued, None)
        i, n = 0, len(running)
        while nxt is not None:
            k = key(nxt)
            while i < n and not k < key(running[i]):  # running requests ranked before nxt
                fill.running(running[i])
                i += 1
            fill.waiting(nxt)
            nxt = None if fill.blocked else next(queued, None)
        if i < n:
            fill.running_run(running[i:] if i else running)


def decide_programs(
    view: SchedulerView, programs: Programs, program_order: np.ndarray, mode: str | None = None
) -> list[Decision]:
    """:func:`decide_ranked` over ``programs.requests`` (``view.running + view.waiting``)
    ranked program by program in ``program_order`` (best first), each program's requests
    by id. Programs are visited only until admission is blocked; the running requests of
    the programs not visited are then seen in the same ranked order (or not at all when
    they all fit: then the order cannot change a decision)."""
    fill, reqs, nrun = Fill(view, mode), programs.requests, len(view.running)
    grouped, starts = programs.members()
    visited = len(program_order)
    for pos, g in enumerate(program_order.tolist()):
        idx = grouped[starts[g] : starts[g + 1]].tolist()
        if len(idx) > 1:
            idx.sort(key=lambda i: reqs[i].request_id)
        for i in idx:
            if i < nrun:
                fill.running(reqs[i])
            elif not fill.blocked:
                fill.waiting(reqs[i])
        if fill.blocked:
            visited = pos + 1
            break
    rank = np.empty(len(program_order), np.intp)
    rank[program_order] = np.arange(len(program_order))
    run_rank = rank[programs.codes[:nrun]]
    rest = np.flatnonzero(run_rank >= visited).tolist()
    if rest and not _all_fit(fill, [reqs[i] for i in rest]):
        rest.sort(key=list(map(BY_ID, view.running)).__getitem__)
        rest.sort(key=run_rank.tolist().__getitem__)  # stable: by (program rank, id)
        fill.running_many([reqs[i] for i in rest])
    return fill.preempts + fill.admits


def all_fit(view: SchedulerView) -> bool:
    """Whether every running request keeps its seat, in any order: they fit the seats and,
    with no negative count, the blocks together (:meth:`Fill.running` for each, in turn)."""
    running = view.running
    if len(running) > view.max_num_seqs:
        return False
    held = [r.num_blocks for r in running]
    needed = [r.blocks_needed for r in running]
    return sum(needed) <= view.free_blocks and min(held + needed, default=0) >= 0


def _all_fit(fill: Fill, running: Sequence[RequestView]) -> bool:
    """Whether every one of ``running`` keeps its seat, in any order (then take them)."""
    cost = sum(map(_NUM_BLOCKS, running)) + sum(map(_BLOCKS_NEEDED, running))
    if len(running) > fill.seats or cost > fill.budget:
        return False
    fill.budget, fill.seats = fill.budget - cost, fill.seats - len(running)
    return True
