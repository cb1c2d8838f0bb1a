"""App-FIFO (Parrot's application-level FIFO, as the Dynasor paper's baseline): requests
of one program are scheduled together (gang), programs in arrival order, no SJF. A
request without a program is a program of its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.core.decisions import Decision
from reasonserve.core.views import SchedulerView
from reasonserve.policies._programs import Programs
from reasonserve.policies._ranked import decide_programs

__all__ = ["AppFIFOPolicy"]


@dataclass(frozen=True, slots=True)
class AppFIFOPolicy:
    name: str = "app_fifo"

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        programs = Programs.of_view(view)
        order = programs.order(programs.min_arrival)  # (earliest arrival, program key)
        return decide_programs(view, programs, order)
