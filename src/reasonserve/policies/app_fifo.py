"""App-FIFO (Parrot's application-level FIFO, as the Dynasor paper's baseline): requests
of one program are scheduled together (gang), programs in arrival order, no SJF. A
request without a program is a program of its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from reasonserve.core.decisions import Decision
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._programs import program_of
from reasonserve.policies._ranked import decide_ranked

__all__ = ["AppFIFOPolicy"]


@dataclass(frozen=True, slots=True)
class AppFIFOPolicy:
    name: str = "app_fifo"

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        members: dict[str, list[RequestView]] = {}
        for r in view.running + view.waiting:
            members.setdefault(program_of(r), []).append(r)
        programs = sorted((min(r.arrival_s for r in reqs), pid) for pid, reqs in members.items())
        by_id = attrgetter("request_id")
        return decide_ranked(view, (r for _, pid in programs for r in sorted(members[pid], key=by_id)))
