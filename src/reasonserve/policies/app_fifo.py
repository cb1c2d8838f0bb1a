"""App-FIFO (Parrot's application-level FIFO, as the Dynasor paper's baseline): requests
of one program are scheduled together (gang), programs in arrival order, no SJF. A
request without a program is a program of its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.core.decisions import Decision
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._programs import program_arrivals, program_of
from reasonserve.policies._ranked import decide_ranked

__all__ = ["AppFIFOPolicy"]


@dataclass(frozen=True, slots=True)
class AppFIFOPolicy:
    name: str = "app_fifo"

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        arrivals = program_arrivals(view)

        def key(r: RequestView) -> tuple:
            pid = program_of(r)
            return (arrivals[pid], pid, r.request_id)

        return decide_ranked(view, sorted(view.running + view.waiting, key=key))
