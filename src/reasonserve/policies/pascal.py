"""PASCAL's intra-instance scheduler (Kim et al., "PASCAL: A Phase-Aware Scheduling
Algorithm for Serving Reasoning-based LLMs", §IV-C).

Two queues: the high-priority queue holds requests in the reasoning phase (prefill
included), the low-priority queue holds answering requests. KV blocks go to the high
queue first; answering requests use what is left and are preempted first when memory
runs out ("controlled preemption", swap by default, as the paper offloads to CPU).
Inside each queue requests are served round-robin with a token ``quantum``: a request
that has computed ``quantum`` tokens since its admission ranks behind waiting requests
of its queue. A reasoning request whose sequence exceeds ``demote_threshold_tokens``
(prompt + generated tokens; the paper uses 5000) is demoted to the low queue.

Pure: the ranking is a function of the view (phase, token counts, quantum used,
enqueue time, id). The token pacer and QoE live in :mod:`reasonserve.policies.pacer`;
instance placement (Algorithm 1) in :mod:`reasonserve.policies.router`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from reasonserve.core.decisions import Decision
from reasonserve.core.errors import InvalidArgumentError
from reasonserve.core.phase import Phase
from reasonserve.core.policy import QUIET_FOREVER
from reasonserve.core.views import RequestView, SchedulerView
from reasonserve.policies._order import ordered
from reasonserve.policies._ranked import decide_segments

__all__ = ["PascalPolicy"]

HIGH, LOW = 0, 1


def _check_int(name: str, value: object, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InvalidArgumentError(f"{name} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True, slots=True)
class PascalPolicy:
    quantum: int = 500  # tokens, for each queue (paper §V-A)
    demote_threshold_tokens: int = 5000  # paper §V-A
    mode: str | None = "swap"
    name: str = "pascal"

    def __post_init__(self) -> None:
        _check_int("quantum", self.quantum, 1)
        _check_int("demote_threshold_tokens", self.demote_threshold_tokens, 0)
        if self.mode not in (None, "recompute", "swap"):
            raise InvalidArgumentError(f"mode must be None, 'recompute' or 'swap', got {self.mode!r}")

    def queue(self, r: RequestView) -> int:
        """0 (high: prefill/reasoning) or 1 (low: answering, or demoted reasoning)."""
        if r.phase is Phase.ANSWERING:
            return LOW
        return LOW if r.num_tokens > self.demote_threshold_tokens else HIGH

    def rank_key(self, r: RequestView, running: bool) -> tuple:
        expired = running and r.quantum_used >= self.quantum
        return (self.queue(r), expired, r.enqueued_s, r.request_id)

    def decide(self, view: SchedulerView) -> Sequence[Decision]:
        by_turn = attrgetter("enqueued_s", "request_id")
        runs: list[tuple[list, list]] = [([], []), ([], [])]  # per queue: (fresh, expired) running
        for r in view.running:
            runs[self.queue(r)][r.quantum_used >= self.quantum].append(r)
        waiting = ordered(view.waiting, "enqueued_s")  # C-level sort; split lazily below
        limit, answering = self.demote_threshold_tokens, Phase.ANSWERING

        def low(r: RequestView) -> bool:  # inlined self.queue(r) == LOW
            return r.phase is answering or r.num_prompt_tokens + r.num_output_tokens > limit

        queued = ((r for r in waiting if not low(r)), (r for r in waiting if low(r)))
        segments = [
            (ordered(run, "enqueued_s"), waits, by_turn)
            for (fresh, expired), waiting_q in zip(runs, queued, strict=True)
            for run, waits in ((fresh, waiting_q), (expired, ()))
        ]
        return decide_segments(view, segments, self.mode)

    def quiet_steps(self, view: SchedulerView) -> int:
        """No decision stays no decision while the ranking holds (the blocks left for the
        first waiting request only shrink as the batch decodes): with nothing waiting, for
        ever; else until a running request's quantum expires in a queue with requests
        waiting, or a running reasoning request passes the demotion threshold."""
        if not view.waiting:
            return QUIET_FOREVER
        waits = {self.queue(r) for r in view.waiting}
        steps = QUIET_FOREVER
        for r in view.running:
            queue = self.queue(r)
            if queue in waits and r.quantum_used < self.quantum:
                steps = min(steps, self.quantum - r.quantum_used)
            if queue == HIGH:
                steps = min(steps, self.demote_threshold_tokens - r.num_tokens + 1)
        return max(1, steps)
