"""Turn a total priority ranking of live requests into Admit/Preempt decisions (pure helper).

Every ranked policy here (PASCAL, Dynasor, App-FIFO, LPM) differs only in the ranking;
the KV arithmetic is shared. Requests are taken best-first: a running request keeps its
seat if its held blocks plus its growth still fit the budget left by better-ranked
requests, otherwise it is preempted; a waiting request is admitted if its blocks fit.
Admission is head-of-line: after the first waiting request that does not fit, no later
one is admitted (so a large request is not starved by a stream of small ones).
"""

from __future__ import annotations

from collections.abc import Sequence

from reasonserve.core.decisions import Admit, Decision, Preempt
from reasonserve.core.views import RequestView, SchedulerView

__all__ = ["decide_ranked"]


def decide_ranked(
    view: SchedulerView, ranked: Sequence[RequestView], mode: str | None = None
) -> list[Decision]:
    """``ranked``: every request of ``view.running`` and ``view.waiting``, best first."""
    running_ids = {r.request_id for r in view.running}
    budget = view.free_blocks + sum(r.num_blocks for r in view.running)
    seats = view.max_num_seqs
    admits: list[Decision] = []
    preempts: list[Decision] = []
    blocked = False
    for r in ranked:
        if r.request_id in running_ids:
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
    return preempts + admits
