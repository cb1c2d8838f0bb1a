"""Priority scheduling as vLLM does it (``--scheduling-policy priority``).

Requests are ranked by priority, most urgent first, then by arrival, then by id.
Running requests keep their seats while their growth fits; when it does not, the
least urgent (latest among equals) is preempted first. Waiting requests are admitted
in rank order until one does not fit (head of line), and never push a running request
out: like vLLM, a more urgent arrival waits for a free seat.

Direction: the engine's ``SamplingParams.priority`` is larger-is-more-urgent;
vLLM's HTTP ``priority`` is lower-first, and ``reasonserve serve`` negates it on the way
in (``docs/serve.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasonserve.core.decisions import Decision
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._ranked import decide_running_first

__all__ = ["PriorityPolicy"]


def _rank(r: RequestView) -> tuple:
    return (-r.priority, r.arrival_s, r.request_id)


@dataclass(frozen=True, slots=True)
class PriorityPolicy:
    name: str = "priority"

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        running = sorted(view.running, key=_rank)
        return decide_running_first(view, running, sorted(view.waiting, key=_rank))
