"""Program-aware priorities through the upstream (Dynasor §4 at the gateway).

The upstream orders its queue by each request's ``priority`` (vLLM with
``--scheduling-policy priority``, SGLang with priority scheduling enabled,
``reasonserve serve``); the gateway computes it per program, at each request:

* **gang**: every request a program sends carries the program's value at that moment,
  so the samples of one self-consistency step, or a chunk and its probe, rank together;
* **approximate shortest-job-first by certainty**: the value grows with the program's
  latest certainty (its stopping rule's, or its samples' semantic-entropy certainty),
  since a more certain program is closer to its exit;
* **starvation**: a program live for more than ``starvation_bound_s`` is escalated above
  every other, the earliest arrival first.

Values are in reasonserve's convention (larger is more urgent); the upstream's client
shim translates them (vLLM: lower first). With ``priorities=False`` every request
carries 0 (for an upstream that does not schedule by priority: vLLM then refuses any
other value). The registry also enforces ``max_programs``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from reasonserve.programs import Trace
from reasonserve.serve.errors import ApiError

__all__ = ["CERTAINTY_LEVELS", "ESCALATED", "ProgramScheduler", "ProgramTicket"]

CERTAINTY_LEVELS = 1000  # certainty in [0, 1] -> priority 0..1000
ESCALATED = 1 << 30  # escalated programs rank above this
_ARRIVAL_STEPS_S = 0.1  # escalated programs: arrival order at this resolution
_MAX_STEPS = (1 << 29) - 1


@dataclass
class ProgramTicket:
    """One admitted program: its id, arrival and trace (whose events carry its certainty)."""

    program_id: str
    arrival_s: float
    trace: Trace

    def certainty(self) -> float:
        """The latest certainty the program read (0 before its first probe or sample)."""
        for event in reversed(self.trace.events):
            value = event.get("certainty")
            if value is not None:
                return min(1.0, max(0.0, float(value)))
        return 0.0


class ProgramScheduler:
    """Live programs: admission (429 past ``max_programs``) and their priorities."""

    def __init__(
        self,
        max_programs: int,
        starvation_bound_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        priorities: bool = True,
    ) -> None:
        self.max_programs, self.starvation_bound_s, self._clock = max_programs, starvation_bound_s, clock
        self.priorities = priorities
        self._epoch = clock()
        self._live: dict[str, ProgramTicket] = {}
        self._ids = itertools.count()

    @property
    def num_live(self) -> int:
        return len(self._live)

    def admit(self, trace: Trace) -> ProgramTicket:
        if len(self._live) >= self.max_programs:
            raise ApiError(
                429,
                f"too many programs in flight (limit {self.max_programs}); retry later",
                headers={"Retry-After": "1"},
            )
        ticket = ProgramTicket(f"p{next(self._ids)}", self._clock(), trace)
        self._live[ticket.program_id] = ticket
        return ticket

    def release(self, ticket: ProgramTicket) -> None:
        self._live.pop(ticket.program_id, None)

    def priority(self, ticket: ProgramTicket) -> int:
        """The value the program's next upstream request carries (module docstring)."""
        if not self.priorities:
            return 0
        now = self._clock()
        if now - ticket.arrival_s > self.starvation_bound_s:
            steps = int((ticket.arrival_s - self._epoch) / _ARRIVAL_STEPS_S)
            return ESCALATED + _MAX_STEPS - min(max(steps, 0), _MAX_STEPS)
        return round(ticket.certainty() * CERTAINTY_LEVELS)
